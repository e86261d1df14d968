"""A scripted walkthrough of "Try your model" and the Points tab, for docs/screenshots/.

    xvfb-run -a python scripts/try_model_walkthrough.py OUT_DIR [DATA_DIR]

The real window with the real engine (the bundled model, offline, a tiny node: 4 questions x 4 answers of at
most 24 tokens, learning rate 0.02 so that one round visibly moves its answers): it trains one round and pauses
(Finish), then a question is drawn from basic_arithmetic and a typed one asked; both answer pairs come from
the engine's llama.cpp, the base one with the adapter off. Saves try-your-model.png (the drawn question) and
try-your-model-typed.png, then points.png: the Points tab replaying docs/swarm-demo.jsonl (two nodes on a
local relay, 5 rounds). Throw-away config and data dirs; the model cache is the user's (SAPO_CACHE_DIR).
DATA_DIR: a data dir this script's node trained before (it has a checkpoint): the node resumes and is paused
before its next round instead, so the answers are those of its last checkpoint.
"""

from __future__ import annotations

import sys
from pathlib import Path

from qt_driver import Driver

ROOT = Path(__file__).resolve().parent.parent
ENGINE_ARGS = ["--model", "smollm2-135m", "--offline", "--tasks", "basic_arithmetic", "--local", "4", "--external", "0",
               "--completions", "4", "--max-tokens", "24", "--eval-every", "0", "--threads", "2", "--lr", "0.02"]
TYPED = "What is 7 + 5?"


def main() -> int:
    d = Driver(Path(sys.argv[1]), "sapo-walk-")
    from app.replay import read_events
    from app.settings import AppSettings
    from app.window import MainWindow

    def wait(what: str, done, timeout: float) -> None:
        d.wait(what, done, timeout,
               failed=lambda: f"engine: {window.engine.state}" if window.engine.state == "crashed" else None)

    data = Path(sys.argv[2]) if len(sys.argv) > 2 else d.home / "data"
    resumed = (data / "checkpoints").is_dir()
    window = MainWindow(AppSettings(data_dir=str(data)), extra_engine_args=ENGINE_ARGS)
    window.resize(1200, 860)
    window.show()
    tab = window.dashboard.try_model
    window.dashboard.tabs.setCurrentWidget(tab)
    window.start()
    wait("the engine's start", lambda: window.engine.state == "running", 1200)
    if resumed:  # paused before its next round
        window.pause()
    else:  # round 1, then paused
        window.engine.finish()
    wait("paused", lambda: window.engine.state == "paused", 3600)

    tab.source.setCurrentIndex(tab.source.findData("basic_arithmetic"))
    tab.ask()
    wait("the drawn question's answers", lambda: tab.pending is None, 3600)
    d.shot(window, "try-your-model.png", 500)
    tab.source.setCurrentIndex(0)
    tab.question.setText(TYPED)
    tab.ask()
    wait("the typed question's answers", lambda: tab.pending is None, 3600)
    d.shot(window, "try-your-model-typed.png", 500)
    print("drawn/typed answers:", tab.asked_text.text(), "|", tab.base_text.toPlainText()[:80], "|",
          tab.trained_text.toPlainText()[:80], flush=True)
    window.close()

    demo = read_events(ROOT / "docs" / "swarm-demo.jsonl")
    replay = MainWindow()
    replay.show_replay(demo.events, "replay of swarm-demo.jsonl", demo.skipped)
    replay.resize(1200, 860)
    replay.show()
    replay.dashboard.tabs.setCurrentWidget(replay.dashboard.points_view)
    d.settle(500)
    replay.refresh()
    d.shot(replay, "points.png", 300)
    print(f"saved try-your-model.png, try-your-model-typed.png, points.png in {d.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
