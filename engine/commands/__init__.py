"""``sapo-engine``: the command line and each subcommand.

``cli`` parses flags and dispatches; ``models`` (+ ``speed``), ``baseline``, ``export`` and
``verify`` are subcommands (``run`` is ``engine.run.runner``, ``experiment`` ``engine.lab``).
Nothing below imports this package.
"""
