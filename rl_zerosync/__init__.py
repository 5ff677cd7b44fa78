"""rl_zerosync: zero-sync DQN for trading on GPUs with Ray RLlib."""

__version__ = "0.1.0"
