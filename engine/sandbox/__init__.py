"""The walls that all scoring stands behind: our own model's answers and every peer's group.

``safe_scoring`` is the first wall (reasoning-gym's scorers without eval, with bounded work);
``workers`` is the second (long-lived worker processes with resource limits and timeouts, one job
per group, msgspec over pipes), each locked in ``jail`` on Linux (Landlock and seccomp).
``python -m engine.sandbox`` is a worker. Stands on ``tasks``.
"""
