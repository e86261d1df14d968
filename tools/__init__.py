"""The repository's own test and benchmark tools for the relay, run from a checkout and never shipped.

``python -m tools.relay_loadgen`` (simulated nodes under load; also ``SimNode``, ``spawn_relay`` and
the other helpers the tests use) and ``python -m tools.relay_fuzz`` (hostile frames at a live relay).
They stand on ``relay`` and ``wire``, and nothing shipped imports them: pyproject.toml leaves this
folder out of the installed packages and of the desktop bundle, and the relay's image copies only
``relay/`` and ``wire/``. Run them from the repository root (tests and benchmarks do).
"""
