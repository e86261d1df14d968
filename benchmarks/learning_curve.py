"""A learning curve: one offline node on the bundled model, then a plot of what it learned.

    python benchmarks/learning_curve.py --rounds 40 --out docs/learning-curve   # runs, then plots
    python benchmarks/learning_curve.py --plot-only --out docs/learning-curve   # re-plot existing events

Runs ``sapo-engine run`` (easy preset, evaluation on the held-out set every 2 rounds) into a fresh
data dir, keeps the events as OUT.jsonl and draws OUT.png: training reward, format rate and accuracy
per round, and held-out greedy pass@1 and sampled reward per evaluation.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def run(rounds: int, events: Path, extra: list[str]) -> None:
    data = Path(tempfile.mkdtemp(prefix="sapo-curve-"))
    events.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "engine", "run", "--model", "smollm2-135m", "--offline", "--preset", "easy",
           "--rounds", str(rounds), "--eval-every", "2", "--eval-per-task", "10", "--data-dir", str(data),
           "--events", str(events), *extra]
    print(" ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True)


def plot(events: Path, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(x) for x in events.read_text().splitlines() if x.strip()]
    rounds = [e for e in rows if e["type"] == "round"]
    evals = [e for e in rows if e["type"] == "eval"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    r = [e["round"] for e in rounds]
    top.plot(r, [e["reward_mean"] for e in rounds], label="training reward (incl. format bonus)")
    top.plot(r, [e["accuracy"] for e in rounds], label="training accuracy (T=1)")
    top.plot(r, [e["format_rate"] for e in rounds], label="format rate", alpha=0.7)
    top.set_ylabel("own rollouts, per round")
    top.set_ylim(0, 1.15)
    top.legend(loc="lower right", fontsize=8)
    er = [e["round"] for e in evals]
    bottom.plot(er, [e["eval_accuracy"] for e in evals], marker=".", label="held-out greedy pass@1")
    bottom.plot(er, [e["eval_sampled_reward"] for e in evals], marker=".", label="held-out sampled reward (T=1)")
    bottom.set_xlabel("round (0 = before training)")
    bottom.set_ylabel("held-out set")
    bottom.set_ylim(0, 1.15)
    bottom.legend(loc="lower right", fontsize=8)
    fig.suptitle("SAPO Swarm, one offline node, SmolLM2-135M (Q4_0), easy preset")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--out", type=Path, default=Path("docs/learning-curve"))
    ap.add_argument("--plot-only", action="store_true")
    ap.add_argument("extra", nargs="*", help="more sapo-engine run flags, after --")
    args = ap.parse_args()
    events = args.out.with_suffix(".jsonl")
    if not args.plot_only:
        run(args.rounds, events, args.extra)
    plot(events, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
