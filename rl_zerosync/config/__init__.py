"""The settings of a run: a YAML file -> one typed :class:`~rl_zerosync.config.settings.Settings`
-> ``ZeroSyncDQNConfig`` (``settings.py``), its sections (``sections.py``) and YAML value
coercion (``yaml_values.py``)."""
