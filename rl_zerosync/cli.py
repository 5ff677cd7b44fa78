"""Command line entry point ``rl-zerosync``."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rl-zerosync", description=__doc__)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
