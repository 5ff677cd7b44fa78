"""``check_batched_env(env)``: gymnasium's ``check_env`` for a :class:`~rl_zerosync.envs.protocol.BatchedEnv`.

A few steps of the env itself, checked against the protocol (see :mod:`rl_zerosync.envs.protocol`):

* spaces: ``observation_space`` a 1-D float32 ``Box`` (width D), ``action_space`` ``Discrete(n)``, n >= 2;
* ``reset()`` -> obs ``float32 [N, D]`` on ``env.device``; ``step(actions i64[N])`` -> obs and
  final_obs ``float32 [N, D]``, reward ``float32 [N]``, terminated and truncated ``bool [N]`` (a float
  done flag is its own error: ``done * x`` arithmetic works on floats and silently breaks masks);
* auto-reset: where an episode ended, ``obs`` (the next episode's start) differs from ``final_obs``
  in at least one ended env; where none ended, ``obs`` equals ``final_obs``;
* no host sync: on CUDA, ``step`` runs under ``torch.cuda.set_sync_debug_mode("error")`` (the runner
  captures ``step`` in a CUDA graph, where a host read or a synchronous copy fails; ``reset`` runs
  outside the graph and is not checked for syncs);
* determinism: ``reset()`` and the same actions twice give the same outputs bit for bit.

The check steps the env it is given and leaves it stepped: call ``env.reset()`` afterwards (the GPU
env runner checks its own envs once, before its rollout resets them, so no extra instance is built).
Every failure is a :class:`BatchedEnvCheckError` naming the env and what was expected.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import gymnasium as gym
import numpy as np
import torch

from rl_zerosync.envs.protocol import BatchedEnv

CHECK_STEPS = 8
"""Steps the check takes per pass (two passes, for determinism)."""
STEP_OUTPUTS = ("obs", "reward", "terminated", "truncated", "final_obs")


class BatchedEnvCheckError(ValueError):
    """A batched env breaks the protocol; the message names the env and what was expected."""


def check_batched_env(env: BatchedEnv, *, steps: int = CHECK_STEPS, name: Optional[str] = None) -> None:
    """Check ``env`` against the :class:`BatchedEnv` protocol (module doc); raises
    :class:`BatchedEnvCheckError` on the first violation. ``name``: how the error names the env
    (default: its class name)."""
    label = name or type(env).__name__
    num_envs, dim, n = _check_spaces(env, label)
    first = _run(env, label, num_envs, dim, n, steps)
    second = _run(env, label, num_envs, dim, n, steps)
    _check_auto_reset(first, label)
    _check_deterministic(first, second, label)


def _fail(label: str, what: str) -> BatchedEnvCheckError:
    return BatchedEnvCheckError(f"check_batched_env({label}): {what} (see rl_zerosync/envs/protocol.py)")


def _check_spaces(env: BatchedEnv, label: str) -> tuple[int, int, int]:
    """(N, D, n) from the env's declared spaces and ``num_envs``."""
    obs_space, act_space = getattr(env, "observation_space", None), getattr(env, "action_space", None)
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise _fail(label, f"observation_space: expected a 1-D gymnasium.spaces.Box, got {obs_space!r}")
    if obs_space.dtype != np.float32:
        raise _fail(label, f"observation_space: expected dtype float32, got {obs_space.dtype}")
    if not isinstance(act_space, gym.spaces.Discrete) or int(act_space.n) < 2:
        raise _fail(label, f"action_space: expected gymnasium.spaces.Discrete(n) with n >= 2, got {act_space!r}")
    num_envs = getattr(env, "num_envs", None)
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise _fail(label, f"num_envs: expected an int >= 1, got {num_envs!r}")
    return num_envs, int(obs_space.shape[0]), int(act_space.n)


@contextlib.contextmanager
def _no_host_sync(device: torch.device) -> Iterator[None]:
    """On CUDA: any host sync inside raises (``set_sync_debug_mode("error")``); else a no-op."""
    if device.type != "cuda":
        yield
        return
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def _call(env: BatchedEnv, label: str, what: str, fn, *args):
    """``fn(*args)`` under the no-sync check (CUDA); a sync is a named error."""
    try:
        with _no_host_sync(torch.device(env.device)):
            return fn(*args)
    except RuntimeError as e:
        if "synchroniz" in str(e).lower():
            raise _fail(label, f"{what} synchronized with the host ({e}); the runner captures step() in a "
                               "CUDA graph, so it must keep values on the device (no .item(), bool(tensor), "
                               ".cpu(), torch.nonzero or copies from host memory)") from e
        raise


def _run(env: BatchedEnv, label: str, num_envs: int, dim: int, n: int, steps: int) -> list[dict]:
    """``reset()`` then ``steps`` steps of fixed actions; each step's outputs, cloned (an env may
    return views of buffers it overwrites). Entry 0 is the reset (``obs`` only)."""
    device = torch.device(env.device)
    obs = env.reset()
    _check_tensor(label, "reset() obs", obs, torch.float32, (num_envs, dim), device)
    out = [{"obs": obs.clone()}]
    index = torch.arange(num_envs, device=device)
    for t in range(steps):
        actions = (index + t) % n
        result = _call(env, label, "step()", env.step, actions)
        out.append(_check_step(label, result, num_envs, dim, device))
    return out


def _check_step(label: str, result, num_envs: int, dim: int, device: torch.device) -> dict:
    if not isinstance(result, tuple) or len(result) != 5:
        raise _fail(label, "step(): expected a 5-tuple (obs, reward, terminated, truncated, final_obs), got "
                           f"{type(result).__name__}{'' if not isinstance(result, tuple) else f' of {len(result)}'}")
    obs, reward, terminated, truncated, final_obs = result
    _check_tensor(label, "step() obs", obs, torch.float32, (num_envs, dim), device)
    _check_tensor(label, "step() reward", reward, torch.float32, (num_envs,), device)
    for flag_name, flag in (("terminated", terminated), ("truncated", truncated)):
        if isinstance(flag, torch.Tensor) and flag.dtype != torch.bool:
            raise _fail(label, f"step() {flag_name}: expected a torch.bool tensor [N], got {flag.dtype} (float done "
                               "flags are not allowed: return a bool mask, e.g. `t >= max_steps`)")
        _check_tensor(label, f"step() {flag_name}", flag, torch.bool, (num_envs,), device)
    _check_tensor(label, "step() final_obs", final_obs, torch.float32, (num_envs, dim), device)
    return {k: v.clone() for k, v in zip(STEP_OUTPUTS, result)}


def _check_tensor(label: str, what: str, value, dtype: torch.dtype, shape: tuple, device: torch.device) -> None:
    """``value`` is a tensor of ``dtype`` and ``shape`` on ``device`` (metadata only: no device read)."""
    if not isinstance(value, torch.Tensor):
        raise _fail(label, f"{what}: expected a torch.Tensor {dtype} {list(shape)}, got {type(value).__name__}")
    if tuple(value.shape) != shape:
        raise _fail(label, f"{what}: expected shape {list(shape)} ([N{', D' if len(shape) == 2 else ''}] from "
                           f"num_envs and observation_space), got {list(value.shape)}")
    if value.dtype != dtype:
        raise _fail(label, f"{what}: expected dtype {dtype}, got {value.dtype}")
    if value.device.type != device.type:
        raise _fail(label, f"{what}: expected a tensor on the env's device {device}, got {value.device}")


def _check_auto_reset(run: list[dict], label: str) -> None:
    """Ended envs start afresh inside ``step`` (obs != final_obs in some ended env); others obs == final_obs."""
    ended_any, reset_seen = False, False
    for t, out in enumerate(run[1:], 1):
        done = (out["terminated"] | out["truncated"]).cpu()  # host read: check, after the no-sync steps
        same = (out["obs"] == out["final_obs"]).all(dim=1).cpu()  # host read: check
        if bool((~same & ~done).any()):
            env_id = int(torch.nonzero(~same & ~done)[0, 0])
            raise _fail(label, f"step {t}: env {env_id} did not end, yet obs != final_obs; expected final_obs "
                               "to equal obs except where an episode ended this step")
        ended_any |= bool(done.any())
        reset_seen |= bool((~same & done).any())
    if ended_any and not reset_seen:
        raise _fail(label, "no auto-reset: where episodes ended, obs equals final_obs; expected step() to "
                           "start the ended envs afresh and return the new episode's first obs (final_obs: "
                           "where the episode ended)")


def _check_deterministic(first: list[dict], second: list[dict], label: str) -> None:
    """Two passes of ``reset()`` + the same actions agree bit for bit."""
    for t, (a, b) in enumerate(zip(first, second)):
        for key in a:
            if not torch.equal(a[key], b[key]):  # host read: check, after the no-sync steps
                where = "reset()" if t == 0 else f"step {t}"
                raise _fail(label, f"not deterministic: {where} {key} differs between two runs of reset() and "
                                   "the same actions; expected randomness from the env's seed (e.g. counter-"
                                   "based draws, rl_zerosync.kernels.rng), never from a global RNG")
