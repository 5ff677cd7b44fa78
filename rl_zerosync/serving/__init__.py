"""A trained policy outside training: TorchScript / ONNX export (``export.py``) and the
:class:`~rl_zerosync.serving.policy.Policy` that acts on raw bars (``policy.py``)."""
