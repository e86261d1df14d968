"""A real headless browser (Debian's ``chromium``) for the status page's tests and screenshots.

Tests that need it skip with a visible reason when it is missing, and fail instead when
``SAPO_REQUIRE_CHROMIUM=1`` (CI sets it: a skipped browser test there would hide a broken page).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

NAMES = ("chromium", "chromium-browser", "google-chrome")


def find() -> str | None:
    return next((path for path in map(shutil.which, NAMES) if path), None)


def require() -> str:
    """The browser's path; skip the test (or fail it, under SAPO_REQUIRE_CHROMIUM=1) when there is none."""
    path = find()
    if path is None:
        why = "no headless browser (Debian package 'chromium') installed"
        if os.environ.get("SAPO_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"{why}, and SAPO_REQUIRE_CHROMIUM=1")
        pytest.skip(why)
    return path


def _run(browser: str, url: str, *args: str, width: int = 1100, height: int = 900, budget_ms: int = 4000) -> str:
    with tempfile.TemporaryDirectory(prefix="sapo-chromium-") as profile:
        cmd = [browser, "--headless", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
               # --no-sandbox: the test machine runs as root, where chromium's sandbox cannot start.
               "--no-sandbox", f"--user-data-dir={profile}", f"--window-size={width},{height}",
               f"--virtual-time-budget={budget_ms}", *args, url]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited with {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def dump_dom(browser: str, url: str, **kw: int) -> str:
    """The DOM after the page's script ran (its first poll included), serialized."""
    return _run(browser, url, "--dump-dom", **kw)


def screenshot(browser: str, url: str, out: Path, **kw: int) -> Path:
    _run(browser, url, f"--screenshot={out}", **kw)
    if not out.is_file():
        raise RuntimeError(f"chromium wrote no screenshot to {out}")
    return out


class Dom(HTMLParser):
    """The text of each element with an id, table rows as lists of cell texts, and every tag seen."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.text: dict[str, str] = {}
        self.rows: dict[str, list[list[str]]] = {}
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self._open: list[tuple[str, str | None]] = []  # (tag, id) of elements still open
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._script = 0
        self.feed(html)

    VOID = {"meta", "link", "br", "img", "input", "hr", "source", "area", "base", "col", "embed", "wbr", "track"}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "script":
            self._script += 1
        if tag in self.VOID:
            return
        self._open.append((tag, a.get("id")))
        if a.get("id") is not None:
            self.text.setdefault(a["id"], "")  # type: ignore[index]
        if tag == "table":
            self._table = a.get("id")
        elif tag == "tr" and self._table:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._script -= 1
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table:
            self.rows.setdefault(self._table, []).append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._script:
            return
        for _, ident in self._open:
            if ident is not None:
                self.text[ident] += data
        if self._cell is not None:
            self._cell.append(data)
