"""GPU env runner: N batched trading envs stepped on the device, one readback per rollout.

>>> config.env_runners(env_runner_cls=GPUEnvRunner, num_envs_per_env_runner=N, rollout_fragment_length=T)
"""
from rl_zerosync.env_runner.epsilon import DeviceEpsilonSchedule
from rl_zerosync.env_runner.gpu_env_runner import GPUEnvRunner, observation_space
from rl_zerosync.env_runner.rollout import ROLLOUT_KEYS, ROUTING_KEYS, DeviceRollout
from rl_zerosync.env_runner.runner_settings import RunnerSettings

__all__ = [
    "DeviceEpsilonSchedule",
    "DeviceRollout",
    "GPUEnvRunner",
    "ROLLOUT_KEYS",
    "ROUTING_KEYS",
    "RunnerSettings",
    "observation_space",
]
