"""``python -m scripts.agreement``: the agreement check (scripts/agreement/gate.py holds it)."""

import sys

from scripts.agreement.gate import main

sys.exit(main())
