"""In-place weight loading: copy into the existing parameters, never reallocate them.

Keeping every parameter's storage (``data_ptr``) fixed keeps a captured CUDA graph of the
rollout valid across weight syncs.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch


def copy_weights_in_place(module: torch.nn.Module, state: Mapping[str, Any]) -> int:
    """Copies ``state`` (name -> numpy array or tensor, any device) into ``module``'s tensors.

    Keys ``module`` does not have are ignored (a full learner state holds target networks an
    inference copy lacks, as in ``TorchRLModule.set_state``). Raises ValueError when one of
    ``module``'s parameters or buffers is missing from ``state`` or has another shape. Returns
    the number of tensors copied.
    """
    own = module.state_dict(keep_vars=True)
    missing = sorted(k for k in own if k not in state)
    if missing:
        raise ValueError(f"weights state is missing keys {missing}; it has {sorted(state)[:20]}")
    sources = {}
    for name, dst in own.items():
        src = state[name]
        if isinstance(src, np.ndarray) or not isinstance(src, torch.Tensor):
            # Weights arrive as read-only numpy arrays (Ray's object store); copy to own the memory.
            src = torch.as_tensor(np.array(src))
        if tuple(src.shape) != tuple(dst.shape):
            raise ValueError(
                f"weights state[{name!r}] has shape {tuple(src.shape)}, the module expects {tuple(dst.shape)}"
            )
        sources[name] = src
    with torch.no_grad():
        for name, dst in own.items():
            dst.copy_(sources[name])
    return len(own)
