"""``python -m relay``: the same as ``sapo-relay``."""

import sys

from relay.cli import main

sys.exit(main())
