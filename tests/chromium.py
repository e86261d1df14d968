"""A real headless browser (Debian's ``chromium``) for the status page's tests and screenshots.

Tests that need it skip with a visible reason when it is missing, and fail instead when
``SAPO_REQUIRE_CHROMIUM=1`` (CI sets it: a skipped browser test there would hide a broken page).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

import children

NAMES = ("chromium", "chromium-browser", "google-chrome")


def find() -> str | None:
    return next((path for path in map(shutil.which, NAMES) if path), None)


def require() -> str:
    """The browser's path; skip the test (or fail it, under SAPO_REQUIRE_CHROMIUM=1) when there is none."""
    path = find()
    if path is None:
        children.missing("no headless browser (Debian package 'chromium') installed", "SAPO_REQUIRE_CHROMIUM")
    return path


def _end_group(pgid: int) -> None:
    """End chromium and every helper it started (renderer, zygote, crashpad): SIGTERM, then SIGKILL.

    Ending only the browser process left helpers writing into the profile while it was being
    removed ("Directory not empty: 'Default'", seen once in CI).
    """
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)  # anyone left in the group?
            except ProcessLookupError:
                return
            time.sleep(0.05)


def _remove_profile(profile: str) -> None:
    shutil.rmtree(profile, ignore_errors=True)
    if os.path.exists(profile):  # a helper outlived SIGKILL's delivery by a moment: once more
        time.sleep(0.5)
        shutil.rmtree(profile)


def _run(browser: str, url: str, *args: str, width: int = 1100, height: int = 900, budget_ms: int = 4000) -> str:
    profile = tempfile.mkdtemp(prefix="sapo-chromium-")
    cmd = [browser, "--headless", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
           # --no-sandbox: the test machine runs as root, where chromium's sandbox cannot start.
           "--no-sandbox", f"--user-data-dir={profile}", f"--window-size={width},{height}",
           f"--virtual-time-budget={budget_ms}", *args, url]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        _end_group(proc.pid)
        proc.wait()
        _remove_profile(profile)
    if proc.returncode != 0:
        raise RuntimeError(f"chromium exited with {proc.returncode}: {err[-2000:]}")
    return out


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


class LivePage:
    """A page kept open in headless chromium, read while it runs (DevTools protocol over its websocket).

    ``--dump-dom`` shows one moment; this shows the page redrawing itself as the relay's numbers change.
    """

    def __init__(self, browser: str, url: str, width: int = 1100, height: int = 900) -> None:
        import json
        import re
        import time
        import urllib.request

        from websockets.sync.client import connect

        self._profile = tempfile.mkdtemp(prefix="sapo-chromium-")
        self.proc = subprocess.Popen(
            [browser, "--headless", "--disable-gpu", "--no-first-run", "--no-sandbox",
             f"--user-data-dir={self._profile}", f"--window-size={width},{height}",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 60
        port = None
        while port is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            found = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            port = int(found.group(1)) if found else None
        if port is None:
            raise RuntimeError("chromium did not open its DevTools port")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            target = next(t for t in json.load(resp) if t["type"] == "page")
        self.ws = connect(target["webSocketDebuggerUrl"], max_size=None)
        self._id = 0
        self._json = json
        self.call("Page.navigate", url=url)

    def call(self, method: str, **params: object) -> dict:
        self._id += 1
        self.ws.send(self._json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            reply = self._json.loads(self.ws.recv(timeout=30))
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def text(self, element_id: str) -> str | None:
        """The text of an element now (None if there is none)."""
        expr = f"(e => e ? e.textContent : null)(document.getElementById({self._json.dumps(element_id)}))"
        return self.call("Runtime.evaluate", expression=expr, returnByValue=True)["result"].get("value")

    def wait_text(self, element_id: str, want: str, seconds: float = 20) -> None:
        import time

        deadline = time.monotonic() + seconds
        while (got := self.text(element_id)) != want:
            if time.monotonic() > deadline:
                raise AssertionError(f"#{element_id} shows {got!r}, not {want!r}, after {seconds} s")
            time.sleep(0.2)

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            _end_group(self.proc.pid)
            self.proc.wait()
            _remove_profile(self._profile)

    def __enter__(self) -> LivePage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
