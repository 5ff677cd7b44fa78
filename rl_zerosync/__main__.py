import sys

from rl_zerosync.cli import main

sys.exit(main())
