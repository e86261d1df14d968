"""How a relay is addressed: the rule for relay URLs, written once for the app and the engine.

Pure functions that say what is wrong (one line, ready to show) or return None: the app shows the
sentence under its form, the engine raises it as its one-line error. The relay may be several
replicas of one swarm, comma-separated, tried in turn.
"""

from __future__ import annotations

from urllib.parse import urlsplit

SCHEMES = ("ws", "wss")


def relay_url_problem(url: str) -> str | None:
    """Why one relay URL is unusable, or None: it must be ws:// or wss://, name a host, and any port be valid."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed [ of an IPv6 address: it does not look like a URL at all
        return _must_look_like(url)
    if parts.scheme not in SCHEMES or not parts.hostname:
        return _must_look_like(url)
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return f"relay URL has an invalid port: {url!r}"
    return None


def split_relay_urls(text: str) -> list[str]:
    """The URLs of a comma-separated list, stripped, blanks left out, in order, once each (not checked)."""
    return list(dict.fromkeys(u.strip() for u in text.split(",") if u.strip()))


def relay_urls_problem(text: str) -> str | None:
    """Why a relay setting (one URL, or replicas comma-separated) is unusable, or None: the first problem found."""
    urls = split_relay_urls(text)
    if not urls:
        return f"relay must be one or more URLs (ws://host:port, comma-separated), got {text!r}"
    return next((problem for url in urls if (problem := relay_url_problem(url)) is not None), None)


def _must_look_like(url: str) -> str:
    return f"relay URL must look like ws://host:port or wss://host:port, got {url!r}"
