"""Benchmark scripts of rl_zerosync, each a module run from the repository root::

    python -m benchmarks.<name> [--quick] [--out FILE]

``benchmarks.common`` holds what they share (results skeleton, timing, sync counter); results go to
``benchmarks/results/<name>.json``, and ``python -m benchmarks.tables`` prints the tables of ``docs/results.md``.
"""
