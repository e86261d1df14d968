"""A learning curve: one offline node on the bundled model, then a plot and a stability check.

    python benchmarks/learning_curve.py --rounds 40 --out docs/learning-curve   # runs, then plots
    python benchmarks/learning_curve.py --plot-only --out docs/learning-curve   # re-plot existing events
    python benchmarks/learning_curve.py --plot-only --out NEW --beside OLD.jsonl  # old curve drawn beside

Runs ``sapo-engine run`` (easy preset, held-out evaluation every ``--eval-every`` rounds) into a fresh
data dir, keeps the events as OUT.jsonl and draws OUT.png: training reward, format rate and accuracy
per round, and held-out greedy pass@1 and sampled reward per evaluation.

Then it prints, per task, where held-out accuracy started and where it ended (the mean of the last
``--tail`` evaluations), with the standard error over questions, and says whether any task ended
clearly below its start (a drop of more than two standard errors of the difference): issue 10's
"stable updates" check. Extra flags after ``--`` go to ``sapo-engine run``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


def run(rounds: int, events: Path, eval_every: int, eval_per_task: int, extra: list[str]) -> None:
    data = Path(tempfile.mkdtemp(prefix="sapo-curve-"))
    events.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "engine", "run", "--model", "smollm2-135m", "--offline", "--preset", "easy",
           "--rounds", str(rounds), "--eval-every", str(eval_every), "--eval-per-task", str(eval_per_task),
           "--data-dir", str(data), "--events", str(events), *extra]
    print(" ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True)


def load(events: Path) -> list[dict]:
    return [json.loads(x) for x in events.read_text().splitlines() if x.strip()]


@dataclass(frozen=True)
class TaskChange:
    task: str
    metric: str  # "greedy" (pass@1) or "sampled" (fully correct at T = 1, else reward)
    before: float
    after: float  # mean of the last evaluations
    se: float  # standard error of after - before, over questions

    @property
    def clearly_below(self) -> bool:
        return self.before - self.after > 2 * self.se


def _se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 0.0) / max(n, 1))


def stability(evals: list[dict], questions_per_task: int, tail: int = 3) -> list[TaskChange]:
    """Per task and metric: the first evaluation against the mean of the last ``tail`` ones.

    The spread is the binomial standard error over the task's held-out questions (the after-figure
    averages ``tail`` evaluations of the same questions, so its own error is taken as one evaluation's:
    conservative). Pure: works on the eval events of a run.
    """
    if len(evals) < 2:
        return []
    first, last = evals[0], evals[-tail:] if len(evals) > tail else evals[1:]
    out = []
    for task, start in first.get("per_task", {}).items():
        for metric, key in (("greedy", "eval_accuracy"), ("sampled", "eval_sampled_accuracy")):
            if start.get(key) is None:
                key = "eval_sampled_reward"
            ends = [e["per_task"][task][key] for e in last if task in e.get("per_task", {})
                    and e["per_task"][task].get(key) is not None]
            if not ends:
                continue
            before, after = float(start[key]), sum(ends) / len(ends)
            se = math.hypot(_se(before, questions_per_task), _se(after, questions_per_task))
            out.append(TaskChange(task, metric, before, after, se))
    return out


def print_stability(rows: list[dict], questions_per_task: int, tail: int) -> bool:
    evals = [e for e in rows if e["type"] == "eval"]
    changes = stability(evals, questions_per_task, tail)
    if not changes:
        print("stability: fewer than two evaluations, nothing to compare")
        return True
    print(f"held-out, per task: round {evals[0]['round']} -> mean of the last {min(tail, len(evals) - 1)} "
          f"evaluations (to round {evals[-1]['round']}), {questions_per_task} questions per task, +- SE of the change")
    for c in changes:
        flag = "  CLEARLY BELOW" if c.clearly_below else ""
        print(f"  {c.task:<26} {c.metric:<8} {c.before:.3f} -> {c.after:.3f}  ({c.after - c.before:+.3f} +- {c.se:.3f}){flag}")
    stable = not any(c.clearly_below for c in changes)
    print("stable: no task ended clearly below its start" if stable
          else "NOT stable: a task ended more than 2 SE below its start")
    return stable


def _held_out(ax, rows: list[dict], style: str, label: str) -> None:
    evals = [e for e in rows if e["type"] == "eval"]
    er = [e["round"] for e in evals]
    ax.plot(er, [e["eval_accuracy"] for e in evals], style, marker=".", label=f"{label}held-out greedy pass@1")
    ax.plot(er, [e["eval_sampled_reward"] for e in evals], style, marker=".",
            label=f"{label}held-out sampled reward (T=1)")


def plot(events: Path, png: Path, beside: Path | None = None, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = load(events)
    rounds = [e for e in rows if e["type"] == "round"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    r = [e["round"] for e in rounds]
    top.plot(r, [e["reward_mean"] for e in rounds], label="training reward (incl. format bonus)")
    top.plot(r, [e["accuracy"] for e in rounds], label="training accuracy (T=1)")
    top.plot(r, [e["format_rate"] for e in rounds], label="format rate", alpha=0.7)
    top.set_ylabel("own rollouts, per round")
    top.set_ylim(0, 1.15)
    top.legend(loc="lower right", fontsize=8)
    _held_out(bottom, rows, "-", "new: " if beside else "")
    if beside:
        bottom.set_prop_cycle(None)
        _held_out(bottom, load(beside), "--", "old: ")
    bottom.set_xlabel("round (0 = before training)")
    bottom.set_ylabel("held-out set")
    bottom.set_ylim(0, 1.15)
    bottom.legend(loc="lower right", fontsize=8)
    fig.suptitle(title or "SAPO Swarm, one offline node, SmolLM2-135M, easy preset")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--out", type=Path, default=Path("docs/learning-curve"))
    ap.add_argument("--eval-every", type=int, default=2)
    ap.add_argument("--eval-per-task", type=int, default=10)
    ap.add_argument("--tail", type=int, default=3, help="last evaluations averaged for the stability check")
    ap.add_argument("--beside", type=Path, help="an older run's events, drawn dashed beside this one")
    ap.add_argument("--title", default="")
    ap.add_argument("--plot-only", action="store_true")
    ap.add_argument("extra", nargs="*", help="more sapo-engine run flags, after --")
    args = ap.parse_args()
    events = args.out.with_suffix(".jsonl")
    if not args.plot_only:
        run(args.rounds, events, args.eval_every, args.eval_per_task, args.extra)
    plot(events, args.out.with_suffix(".png"), args.beside, args.title)
    rows = load(events)
    start = next((e for e in rows if e["type"] == "eval"), None)
    per_task = args.eval_per_task
    if start and start.get("per_task"):
        per_task = max(1, round(start["eval_questions"] / len(start["per_task"])))
    sys.exit(0 if print_stability(rows, per_task, args.tail) else 1)


if __name__ == "__main__":
    main()
