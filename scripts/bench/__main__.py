"""``python -m scripts.bench``: the bench (scripts/bench/cli.py holds the options and the order of the runs)."""

import sys

from scripts.bench.cli import main

sys.exit(main())
