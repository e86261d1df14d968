"""The one exception type a user sees.

Anything raised as ``SapoError`` is a problem with the user's input or environment
(bad config, missing model, unreachable relay, ...). The CLI prints its message as a
single line on stderr and exits non-zero; every other exception is a bug.
"""


class SapoError(Exception):
    """A user-facing error with a one-line, actionable message."""


def first_line(exc: BaseException, limit: int = 160) -> str:
    """An exception's first line, for one-line messages; its type name when it says nothing."""
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:limit]
