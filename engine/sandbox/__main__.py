"""``python -m engine.sandbox``: one scoring worker (started by ``engine.sandbox.workers.Sandbox``)."""

import sys

from engine.sandbox.workers import DEFAULT_MEMORY_MB, serve

serve(int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MEMORY_MB)
