"""Shared pytest setup: GPU-marked tests skip cleanly without CUDA, multigpu ones with < 2 GPUs."""
from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    skip_multi = pytest.mark.skip(reason=f"needs two CUDA GPUs, found {gpus}")
    for item in items:
        if "gpu" in item.keywords and gpus == 0:
            item.add_marker(skip_gpu)
        elif "multigpu" in item.keywords and gpus < 2:
            item.add_marker(skip_multi)
