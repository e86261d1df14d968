"""Screenshots of the relay's status page for docs/: a real relay, real signed clients, headless chromium.

    python scripts/relay_status_screenshots.py [OUT_DIR]

saves OUT_DIR/relay-status.png (desktop width) and relay-status-phone.png (390 px, a phone)
of /swarm/demo, where a few simulated nodes have shared groups and one has trained on others'.
OUT_DIR defaults to docs/screenshots.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import chromium  # noqa: E402  (tests/chromium.py: the same browser driver the tests use)
from test_relay_status import populate  # noqa: E402
from tools.relay_loadgen import spawn_relay  # noqa: E402


async def shoot(out: Path, browser: str) -> None:
    with tempfile.TemporaryDirectory() as work:
        relay = spawn_relay([], Path(work))
        try:
            nodes = await populate(relay.url, "demo", [5, 4, 6, 2, 3, 0],
                                   models=["SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct", "gemma-3-270m"])
            for name, width, height in (("relay-status", 1000, 760), ("relay-status-phone", 390, 844)):
                path = await asyncio.to_thread(chromium.screenshot, browser, relay.http + "/swarm/demo",
                                               out / f"{name}.png", width=width, height=height)
                print(path)
            for node in nodes:
                await node.close()
        finally:
            relay.stop()


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "screenshots"
    browser = chromium.find()
    if browser is None:
        print("no chromium found (Debian package 'chromium')", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    asyncio.run(shoot(out, browser))
    return 0


if __name__ == "__main__":
    sys.exit(main())
