"""Zero-sync DQN learner: RLlib glue, device replay buffer, guard state and graph capture."""
from rl_zerosync.learner.dqn_learner import COMPONENT_ZEROSYNC, ZeroSyncDQNTorchLearner
from rl_zerosync.learner.learner_settings import LearnerSettings
from rl_zerosync.learner.replay import DeviceReplayBuffer, ReplaySample
from rl_zerosync.learner.training_guard import METRIC_NAMES, TrainingGuard, TrainingHalted

__all__ = [
    "COMPONENT_ZEROSYNC",
    "DeviceReplayBuffer",
    "LearnerSettings",
    "METRIC_NAMES",
    "ReplaySample",
    "TrainingGuard",
    "TrainingHalted",
    "ZeroSyncDQNTorchLearner",
]
