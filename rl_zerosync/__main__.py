import sys

from rl_zerosync.cli import main

if __name__ == "__main__":  # spawned helper processes (fresh training series) import this module
    sys.exit(main())
