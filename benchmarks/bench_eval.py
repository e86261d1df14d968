"""Held-out evaluation across versions: the node's own evaluation, side by side in one run (issue 22, item 3).

    python benchmarks/bench_eval.py --old /tmp/d9a16b6 [--old /tmp/other ...] [--pairs 2] [--threads 2]
    python benchmarks/bench_eval.py --old /tmp/d9a16b6 --per-task 32 --threads 1 --run-args "--local 2 --external 2 --max-tokens 48"

Each run is `sapo-engine run --model smollm2-135m --offline --rounds 1 --eval-every 1` (what `make run` does, with
an evaluation before round 1 and after it) with a fresh data dir, versions in rotating order so that slow phases of a
shared machine hit all. The evaluation before round 1 is the same work in every version (the untrained model, the
same held-out questions, one greedy and two sampled answers each), so its time is the comparison; its greedy
accuracy is printed beside it to show that. Printed: each version's fastest and median first evaluation, and its
ratio to every --old version. ``--run-args`` adds settings to every run: the second line above is an
experiment's evaluation (docs/RESULTS.md: I = J = 2, <= 48 tokens, 128 held-out questions, one thread a worker).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from versions import same_work  # this folder is the script's: on sys.path

ROOT = Path(__file__).resolve().parents[1]


def one_run(tree: Path, threads: int, per_task: int, work: Path, extra: list[str]) -> dict:
    data, events = work / "data", work / "events.jsonl"
    cmd = [sys.executable, "-m", "engine", "run", "--model", "smollm2-135m", "--offline", "--rounds", "1",
           "--eval-every", "1", "--eval-per-task", str(per_task), "--threads", str(threads), "--quiet",
           "--data-dir", str(data), "--events", str(events), *same_work(tree, "run", work), *extra]
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: the run failed: {proc.stderr.strip()[-400:]}")
    evals = [json.loads(x) for x in events.read_text().splitlines() if '"eval"' in x]
    evals = [e for e in evals if e.get("type") == "eval"]
    return evals[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", type=Path, action="append", default=[], help="an older checkout of the engine")
    ap.add_argument("--pairs", type=int, default=2, help="runs of each version, in rotating order")
    ap.add_argument("--per-task", type=int, default=16, help="held-out questions per task (the node's default)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--run-args", default="", help="more settings for every run, e.g. an experiment's")
    args = ap.parse_args()
    extra = shlex.split(args.run_args)
    trees = {"new": ROOT, **{f"old{i}" if len(args.old) > 1 else "old": p.resolve() for i, p in enumerate(args.old)}}
    names = list(trees)
    for name, tree in trees.items():
        head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        print(f"{name}: {tree} at {head.stdout.strip() or '?'}", flush=True)
    got: dict[str, list[dict]] = {who: [] for who in names}
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        for pair in range(args.pairs):
            for who in names[pair % len(names):] + names[:pair % len(names)]:
                work = Path(tmp) / f"{who}-{pair}"
                work.mkdir()
                e = one_run(trees[who], args.threads, args.per_task, work, extra)
                got[who].append(e)
                print(f"run {pair} {who}: evaluation {e['eval_s']:.1f} s, {e['eval_questions']} questions, "
                      f"greedy {e['eval_accuracy']:.3f}", flush=True)
    best = {who: min(e["eval_s"] for e in evals) for who, evals in got.items()}
    for who, evals in got.items():
        print(f"{who}: fastest {best[who]:.1f} s, median {statistics.median(e['eval_s'] for e in evals):.1f} s "
              f"over {len(evals)} runs")
    for who in names[1:]:
        print(f"new vs {who}: evaluation {best[who] / best['new']:.2f}x faster (fastest against fastest)")


if __name__ == "__main__":
    main()
