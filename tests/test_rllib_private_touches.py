"""The RLlib private members rl_zerosync relies on still behave as relied on (docs/ARCHITECTURE.md,
"RLlib private touches"). Each check reads RLlib's own source or objects, so an RLlib upgrade that
changes one of them fails here first, naming it."""
from __future__ import annotations

import inspect

from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.learner_group import LearnerGroup
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.checkpoints import Checkpointable


def _source(obj) -> str:
    return inspect.getsource(obj)


def test_update_from_batch_calls_the_overridden_update_hook():
    # ZeroSyncDQNTorchLearner._update replaces the per-batch update of the drop-in path.
    src = _source(Learner.update)
    assert "self._update(" in src
    assert list(inspect.signature(TorchLearner._update).parameters)[:2] == ["self", "batch"]


def test_build_makes_ddp_through_the_overridden_hook_after_setting_the_device():
    # The learner builds RLlib's DDP wrapper on its capture stream by overriding this hook.
    src = _source(TorchLearner.build)
    assert "self._device = " in src and "self._make_modules_ddp_if_necessary()" in src
    assert src.index("self._device = ") < src.index("self._make_modules_ddp_if_necessary()")


def test_weights_seq_no_counts_updates_and_is_checkpointed():
    # train(K) bumps _weights_seq_no as Learner.update() does; runners compare it on weight sync.
    assert "self._weights_seq_no += 1" in _source(Learner.update)
    assert "self._weights_seq_no" in _source(Learner.get_state)


def test_local_learner_group_calls_foreach_learner_on_its_learner():
    # rl_zerosync.algorithm.local_learner_of (ZeroSyncDQN.local_learner) gets the learner of a local group
    # (num_learners 0) through the public foreach_learner: a local group calls the function on the learner
    # itself, in this process, not on a copy.
    assert "self._learner = learner_class(" in _source(LearnerGroup.__init__)
    src = _source(LearnerGroup.foreach_learner)
    assert "if self.is_local:" in src and "func(self._learner, **kwargs)" in src


def test_check_component_helper_exists():
    # get_state overrides filter their extra components with RLlib's helper.
    # (Ray's tracing hooks may append a ``_ray_trace_ctx`` parameter once Ray has run in this process.)
    assert list(inspect.signature(Checkpointable._check_component).parameters)[:4] == [
        "self", "name", "components", "not_components"]


def test_trainable_makes_its_log_folder_through_the_overridden_hook():
    # ZeroSyncDQN._setup_logdir puts Algorithm.logdir inside the run directory (config.log_dir).
    from ray.tune.trainable import Trainable

    assert "self._setup_logdir()" in _source(Trainable.__init__)
    assert "self._storage = storage" in _source(Trainable.__init__)
    src = _source(Trainable._setup_logdir)
    assert "self._logdir = " in src and "DEFAULT_STORAGE_PATH" in src
    assert "return self._logdir" in _source(Trainable.logdir.fget)


def test_the_log_folder_goes_where_the_config_says(tmp_path):
    from rl_zerosync.algorithm import ZeroSyncDQN, ZeroSyncDQNConfig

    algo = ZeroSyncDQN.__new__(ZeroSyncDQN)  # the hook alone, on the attributes Trainable.__init__ sets first
    algo.config, algo._storage = ZeroSyncDQNConfig().log_to(str(tmp_path / "run" / "rllib")), None
    algo._setup_logdir()
    assert algo.logdir == str(tmp_path / "run" / "rllib") and (tmp_path / "run" / "rllib").is_dir()
