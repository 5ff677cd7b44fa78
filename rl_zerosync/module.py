"""`ZeroSyncQModule`: the Q-network RLModule for the three action modes.

Modes (``model_config["action_mode"]``):

* ``"routed"``: Q over the 5 exposures (action space ``Discrete(5)``); order type and urgency are
  added by the routing rule outside the network.
* ``"flat"``: Q over all 45 factored actions (``Discrete(45)``), or over any ``Discrete(n)`` action
  space of another batched env (:mod:`rl_zerosync.envs.protocol`).
* ``"branching"``: action-branching dueling head (BDQ): a shared MLP torso, one value stream
  ``V`` and advantage heads of sizes 5, 3, 3; ``Q_b = V + A_b - mean(A_b)`` per branch. The action
  space is ``Discrete(45)`` (factored index ``e * 9 + o * 3 + u``); the greedy action is the
  per-branch argmax.

Network: ``hidden`` (default ``[256, 256]``) Linear+ReLU layers, then one Linear head whose output
columns are split into the streams. With ``dueling=True`` (routed/flat) the head also carries a value
column and ``Q = V + A - mean(A)``. Branching is always dueling. The whole Q network (torso + head) is
one sub-module ``q_net`` with one target copy ``_target_q_net``, so a target update is one foreach
over two parameter lists.

Two optional regularizers (both off by default, and then the network and its ``state_dict`` are
exactly the plain Linear+ReLU stack, so old checkpoints load):

* ``layernorm=True``: a ``LayerNorm`` (with affine weight and bias) after every hidden Linear,
  before its ReLU. It acts the same in train and eval mode.
* ``dropout=p`` (``0 <= p < 1``): dropout after every hidden ReLU, applied **only** in
  ``forward_train`` to the online network's forward of the current observations, and only while
  the module is in train mode (``self.training``; RLlib's ``TorchRLModule.forward_train`` switches
  to train mode, ``forward_inference`` / ``forward_exploration`` to eval mode). The target
  network, the double-Q online forward on the next observations (which only picks the ``argmax``
  actions), the inference / exploration forwards, :meth:`ZeroSyncQModule.q_values`,
  :meth:`ZeroSyncQModule.branch_q`, ``compute_q_values`` and ``forward_target`` are always
  deterministic, whatever the mode. Dropout adds no sub-module: the ``state_dict`` is the same
  with or without it. With dropout on, the double-Q forward of ``obs`` and ``next_obs`` is two
  forwards instead of one concatenated forward.

Forward outputs of ``forward_train`` (keys shared with RLlib's DQN):

* routed/flat: ``QF_PREDS`` [B, A], ``QF_NEXT_PREDS`` [B, A] (when ``double_q``),
  ``QF_TARGET_NEXT_PREDS`` [B, A].
* branching: ``BRANCH_QF_PREDS``, ``BRANCH_QF_NEXT_PREDS`` (when ``double_q``),
  ``BRANCH_QF_TARGET_NEXT_PREDS``: each a tuple of three tensors ``([B, 5], [B, 3], [B, 3])`` for
  exposure, order type and urgency.

Exploration under a stock ``SingleAgentEnvRunner`` is epsilon-greedy exactly like RLlib's
``DefaultDQNTorchRLModule`` (``model_config["epsilon"]`` is a constant or a piecewise schedule over
the env-step ``t``); the GPU env runner instead calls :meth:`ZeroSyncQModule.q_values` /
:meth:`ZeroSyncQModule.branch_q` and selects actions with the on-device kernels.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import torch
from torch import nn

from ray.rllib.algorithms.dqn.default_dqn_rl_module import (
    QF_NEXT_PREDS,
    QF_PREDS,
    QF_TARGET_NEXT_PREDS,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.utils import make_target_network
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI, QNetAPI, TargetNetworkAPI
from ray.rllib.core.rl_module.rl_module import RLModule, RLModuleSpec
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from ray.rllib.utils.annotations import override
from ray.rllib.utils.schedules.scheduler import Scheduler

from rl_zerosync.actions import ACTION_MODES, BRANCH_SIZES, NUM_ACTIONS, NUM_EXPOSURES
from rl_zerosync.env_runner.epsilon import normalize_epsilon_schedule, rllib_schedule
from rl_zerosync.presets import API, DEFAULT_HIDDEN, check_model_value

__all__ = [
    "ACTION_MODES",
    "BRANCH_QF_NEXT_PREDS",
    "BRANCH_QF_PREDS",
    "BRANCH_QF_TARGET_NEXT_PREDS",
    "QF_NEXT_PREDS",
    "QF_PREDS",
    "QF_TARGET_NEXT_PREDS",
    "ZeroSyncQModule",
    "make_module_spec",
]

BRANCH_QF_PREDS = "branch_qf_preds"
BRANCH_QF_NEXT_PREDS = "branch_qf_next_preds"
BRANCH_QF_TARGET_NEXT_PREDS = "branch_qf_target_next_preds"

_ACTIONS_PER_MODE = {"routed": NUM_EXPOSURES, "flat": NUM_ACTIONS, "branching": NUM_ACTIONS}


class QNetwork(nn.Module):
    """MLP torso + one linear head; returns Q [B, A] or concatenated per-branch Q [B, 11].

    Each hidden layer is ``Linear -> [LayerNorm] -> ReLU`` in ``self.torso`` (LayerNorm only when
    enabled, so the default ``state_dict`` keys are unchanged), followed by functional dropout.
    Dropout adds no module, so a network with dropout has the same ``state_dict`` as one without.
    It runs only when :meth:`forward` is called with ``dropout=True`` *and* the network is in
    train mode; every other call is deterministic.

    Args:
        obs_dim: Flattened observation size.
        hidden: Hidden layer widths (Linear + ReLU each).
        num_actions: Q outputs for routed/flat.
        dueling: Add a value column and combine ``V + A - mean(A)`` (routed/flat).
        branches: Branch sizes for the BDQ head (implies dueling); ``None`` for routed/flat.
        layernorm: LayerNorm after every hidden Linear, before the ReLU.
        dropout: Dropout probability after every hidden ReLU (0 = off).
    """

    def __init__(
        self,
        *,
        obs_dim: int,
        hidden: Sequence[int],
        num_actions: int,
        dueling: bool,
        branches: Optional[Sequence[int]] = None,
        layernorm: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        layers: List[nn.Module] = []
        width = obs_dim
        for h in hidden:
            layers.append(nn.Linear(width, h))
            if layernorm:
                layers.append(nn.LayerNorm(h))
            layers.append(nn.ReLU())
            width = h
        self.torso = nn.Sequential(*layers)
        self.layernorm = bool(layernorm)
        self.dropout = float(dropout)
        self.branches = tuple(branches) if branches is not None else None
        self.dueling = bool(dueling or self.branches is not None)
        adv_width = sum(self.branches) if self.branches is not None else num_actions
        self.head = nn.Linear(width, adv_width + (1 if self.dueling else 0))

    def forward(self, obs: torch.Tensor, dropout: bool = False) -> torch.Tensor:
        """Q-values [B, A]; for branching the per-branch Q concatenated along dim 1.

        ``dropout=True`` applies dropout after every hidden ReLU if the network is in train mode
        and ``self.dropout > 0``; by default (and always in eval mode) the forward is deterministic.
        """
        x = torch.flatten(obs, start_dim=1)
        if dropout and self.training and self.dropout > 0.0:
            for layer in self.torso:
                x = layer(x)
                if isinstance(layer, nn.ReLU):
                    x = nn.functional.dropout(x, p=self.dropout, training=True)
        else:
            x = self.torso(x)
        out = self.head(x)
        if not self.dueling:
            return out
        value, adv = out[:, :1], out[:, 1:]
        if self.branches is None:
            return value + adv - adv.mean(dim=1, keepdim=True)
        parts = [a - a.mean(dim=1, keepdim=True) for a in adv.split(self.branches, dim=1)]
        return value + torch.cat(parts, dim=1)


def _model_value(cfg: Dict[str, Any], key: str, default: Any) -> Any:
    """``model_config[key]`` (absent or None: ``default``), checked by the settings file's rule."""
    value = cfg.get(key)
    value = default if value is None else value
    check_model_value(key, value)
    return value


class ZeroSyncQModule(TorchRLModule, QNetAPI, TargetNetworkAPI, InferenceOnlyAPI):
    """DQN RLModule for the routed, flat and branching action modes (see the module docstring).

    ``model_config`` keys: ``action_mode`` ("routed" | "flat" | "branching"; if absent it is
    inferred from the action space: Discrete(5) -> routed, any other Discrete(n) -> flat; flat takes
    any ``n >= 2``, routed needs 5 and branching 45), ``hidden``
    (list of positive ints, default [256, 256]), ``dueling`` (bool, routed/flat only; branching is
    always dueling), ``double_q`` (bool, default True), ``epsilon`` (float or schedule),
    ``num_atoms`` (must be 1 if given: distributional DQN is not supported), ``layernorm`` (bool,
    default False: LayerNorm after every hidden Linear, before the ReLU) and ``dropout`` (float in
    [0, 1), default 0.0: dropout after every hidden ReLU, only in the train-mode ``forward_train``
    forward of the current observations; see the module docstring). ``action_mode``, ``hidden``,
    ``dueling``, ``layernorm`` and ``dropout`` are a settings file's ``model`` keys, checked by the same
    rules (:data:`rl_zerosync.presets.MODEL_KEYS`) here and at load; absent or None, they default.
    """

    framework: str = "torch"

    @override(RLModule)
    def setup(self) -> None:
        super().setup()
        cfg = dict(self.model_config or {})
        if not isinstance(self.action_space, gym.spaces.Discrete):
            raise ValueError(
                f"action_space must be gymnasium.spaces.Discrete, got {self.action_space!r}"
            )
        n = int(self.action_space.n)
        mode = cfg.get("action_mode")
        if mode is None:
            mode = "routed" if n == NUM_EXPOSURES else "flat"
        # The model keys' rules are a settings file's (rl_zerosync.presets.MODEL_KEYS), checked at load too.
        check_model_value("action_mode", mode)
        if mode == "flat" and n < 2:
            raise ValueError(f"action_space must be Discrete(n) with n >= 2 for action_mode 'flat', got Discrete({n})")
        if mode != "flat" and n != _ACTIONS_PER_MODE[mode]:
            raise ValueError(
                f"action_space must be Discrete({_ACTIONS_PER_MODE[mode]}) for action_mode "
                f"{mode!r}, got Discrete({n})"
            )
        hidden = _model_value(cfg, "hidden", DEFAULT_HIDDEN)
        num_atoms = cfg.get("num_atoms", 1)
        if num_atoms not in (None, 1):
            raise ValueError(
                f"model_config['num_atoms'] must be 1 (distributional DQN is not supported), "
                f"got {num_atoms!r}"
            )
        dueling = _model_value(cfg, "dueling", False)
        layernorm = _model_value(cfg, "layernorm", API.layernorm)
        dropout = _model_value(cfg, "dropout", API.dropout)
        if self.observation_space is None or self.observation_space.shape is None:
            raise ValueError(f"observation_space must be a Box, got {self.observation_space!r}")
        obs_dim = 1
        for d in self.observation_space.shape:
            obs_dim *= int(d)

        self.action_mode: str = mode
        self.num_actions: int = n
        self.hidden: Tuple[int, ...] = tuple(int(h) for h in hidden)
        self.uses_dueling: bool = dueling or mode == "branching"
        self.uses_double_q: bool = bool(cfg.get("double_q", True))
        self.uses_layernorm: bool = layernorm
        self.dropout: float = float(dropout)
        # Outside a DQNConfig the API preset's schedule; one rule with the env runner and settings.
        epsilon = normalize_epsilon_schedule(cfg.get("epsilon", API.epsilon))
        self.epsilon_schedule = Scheduler(fixed_value_or_schedule=rllib_schedule(epsilon), framework="torch")
        self.q_net = QNetwork(
            obs_dim=obs_dim,
            hidden=self.hidden,
            num_actions=n,
            dueling=self.uses_dueling,
            branches=BRANCH_SIZES if mode == "branching" else None,
            layernorm=self.uses_layernorm,
            dropout=self.dropout,
        )

    # ---- acting helpers (called by the GPU env runner) ------------------------------------
    @torch.no_grad()
    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """Online Q-values, no autograd: [B, 5] routed, [B, 45] flat, [B, 11] branching.

        In branching mode the columns are the per-branch ``V + A_b - mean(A_b)`` concatenated as
        exposure (5) | order type (3) | urgency (3); :meth:`branch_q` returns them split.
        """
        return self.q_net(obs)

    @torch.no_grad()
    def branch_q(self, obs: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-branch online Q-values ``(q_exposure [B, 5], q_order [B, 3], q_urgency [B, 3])``."""
        if self.action_mode != "branching":
            raise ValueError(f"branch_q needs action_mode 'branching', this module is {self.action_mode!r}")
        q5, qo, qu = self.q_net(obs).split(BRANCH_SIZES, dim=1)
        return q5, qo, qu

    def greedy_actions(self, q: torch.Tensor) -> torch.Tensor:
        """Greedy action indices (factored for branching) from :meth:`q_values` output."""
        if self.action_mode != "branching":
            return torch.argmax(q, dim=1)
        e, o, u = (part.argmax(dim=1) for part in q.split(BRANCH_SIZES, dim=1))
        return e * (BRANCH_SIZES[1] * BRANCH_SIZES[2]) + o * BRANCH_SIZES[2] + u

    # ---- RLModule forwards ----------------------------------------------------------------
    @override(TorchRLModule)
    def _forward_inference(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        with torch.no_grad():
            q = self.q_net(batch[Columns.OBS])
            return {Columns.ACTIONS: self.greedy_actions(q)}

    @override(TorchRLModule)
    def _forward_exploration(self, batch: Dict[str, Any], t: int = 0, **kwargs) -> Dict[str, Any]:
        with torch.no_grad():
            q = self.q_net(batch[Columns.OBS])
            greedy = self.greedy_actions(q)
            epsilon = self.epsilon_schedule.update(t)
            b = greedy.shape[0]
            random_actions = torch.randint(0, self.num_actions, (b,), device=greedy.device)
            explore = torch.rand((b,), device=greedy.device) < epsilon
            return {Columns.ACTIONS: torch.where(explore, random_actions, greedy)}

    @override(RLModule)
    def _forward_train(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        if self.inference_only:
            raise RuntimeError(
                "forward_train needs the learner copy of ZeroSyncQModule (inference_only=False)"
            )
        obs, next_obs = batch[Columns.OBS], batch[Columns.NEXT_OBS]
        if self.dropout > 0.0 and self.training:
            # Dropout only in the forward that is trained; the double-Q action pick on s' stays
            # deterministic (a separate forward, so it gets no dropout mask).
            q_curr = self.q_net(obs, dropout=True)
            q_next = self.q_net(next_obs) if self.uses_double_q else None
        elif self.uses_double_q:
            q_curr, q_next = self.q_net(torch.cat([obs, next_obs], dim=0)).chunk(2, dim=0)
        else:
            q_curr, q_next = self.q_net(obs), None
        with torch.no_grad():
            q_target_next = self._target_q_net(next_obs)
        if self.action_mode != "branching":
            out = {QF_PREDS: q_curr, QF_TARGET_NEXT_PREDS: q_target_next}
            if q_next is not None:
                out[QF_NEXT_PREDS] = q_next
            return out
        out = {
            BRANCH_QF_PREDS: tuple(q_curr.split(BRANCH_SIZES, dim=1)),
            BRANCH_QF_TARGET_NEXT_PREDS: tuple(q_target_next.split(BRANCH_SIZES, dim=1)),
        }
        if q_next is not None:
            out[BRANCH_QF_NEXT_PREDS] = tuple(q_next.split(BRANCH_SIZES, dim=1))
        return out

    # ---- QNetAPI / TargetNetworkAPI / InferenceOnlyAPI --------------------------------------
    @override(QNetAPI)
    def compute_q_values(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        return {QF_PREDS: self.q_net(batch[Columns.OBS])}

    @override(TargetNetworkAPI)
    def make_target_networks(self) -> None:
        self._target_q_net = make_target_network(self.q_net)

    @override(TargetNetworkAPI)
    def get_target_network_pairs(self) -> List[Tuple[nn.Module, nn.Module]]:
        return [(self.q_net, self._target_q_net)]

    @property
    def target_q_net(self) -> nn.Module:
        """The target copy of ``q_net`` (read-only view; RLlib's convention names it ``_target_q_net``)."""
        return self._target_q_net

    @override(TargetNetworkAPI)
    def forward_target(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        return {QF_PREDS: self._target_q_net(batch[Columns.OBS])}

    @override(InferenceOnlyAPI)
    def get_non_inference_attributes(self) -> List[str]:
        return ["_target_q_net"]


def make_module_spec(
    *,
    action_mode: str,
    hidden: Sequence[int] = DEFAULT_HIDDEN,
    dueling: bool = False,
    observation_space: Optional[gym.Space] = None,
    action_space: Optional[gym.Space] = None,
    **model_config: Any,
) -> RLModuleSpec:
    """RLModuleSpec of a :class:`ZeroSyncQModule` (spaces may be left to RLlib).

    Pass it to ``config.rl_module(rl_module_spec=...)``; extra keyword arguments (``epsilon``,
    ``double_q``, ``layernorm``, ``dropout``) are added to ``model_config``. Without spaces, RLlib
    fills both from the env and the module checks that the env's action space fits the mode. With
    only ``observation_space`` (a standalone build) the action space defaults to ``Discrete(5)``
    for routed and ``Discrete(45)`` otherwise.
    """
    if action_mode not in ACTION_MODES:
        raise ValueError(f"action_mode must be one of {ACTION_MODES}, got {action_mode!r}")
    if action_space is None and observation_space is not None:
        action_space = gym.spaces.Discrete(_ACTIONS_PER_MODE[action_mode])
    return RLModuleSpec(
        module_class=ZeroSyncQModule,
        observation_space=observation_space,
        action_space=action_space,
        model_config={
            "action_mode": action_mode,
            "hidden": list(hidden),
            "dueling": bool(dueling),
            **model_config,
        },
    )
