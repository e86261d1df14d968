"""What an experiment agent-round costs: this checkout against an older one, side by side.

    python benchmarks/bench_experiment.py --old /tmp/sapo-d9a16b6 [--pairs 2] [--agents 4] [--rounds 3]

Both run `sapo-engine experiment` on the same work: the settings of docs/RESULTS.md's runs (I = J = 2,
L = 4, <= 48 tokens, easy preset, bundled model) for the configurations alone and swarm, one seed, with
one held-out question per task so that evaluation hardly counts (it is measured apart, in RESULTS.md).
  old: the older checkout as docs/RESULTS.md ran it: one process, `--threads 1`
  new: this checkout's defaults: cells in parallel workers, one thread per agent (engine/lab/experiment.py)
Runs alternate (old, new, new, old, ...) so that a slow phase of a shared machine hits both. Printed per
version: wall time, agent-rounds, agent-rounds per hour, and the median agent-round's split.
Prepare the old checkout with `git worktree add /tmp/sapo-d9a16b6 d9a16b6`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from versions import same_work  # this folder is the script's: on sys.path

ROOT = Path(__file__).resolve().parents[1]


def one_run(tree: Path, work: Path, agents: int, rounds: int, extra: list[str]) -> dict[str, float]:
    cmd = [sys.executable, "-m", "engine", "experiment", "--out", str(work), "--agents", str(agents),
           "--rounds", str(rounds), "--seeds", "0", "--configs", "alone,swarm", "--local", "2", "--external", "2",
           "--completions", "4", "--max-tokens", "48", "--eval-per-task", "1",
           *same_work(tree, "experiment", work), *extra]
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: the experiment failed: {proc.stderr.strip()[-600:]}")
    rows = [json.loads(x) for p in work.rglob("records.jsonl") for x in p.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r.get("type") == "round"]
    med = {k: statistics.median(float(r.get(k, 0) or 0) for r in rows) for k in ("round_s", "gen_s", "train_s")}
    return {"wall_s": wall, "agent_rounds": len(rows), "per_hour": len(rows) / wall * 3600, **med}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, required=True, help="an older checkout (git worktree) to compare with")
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    versions = {"old": (args.old, ["--threads", "1"]), "new": (ROOT, [])}
    results: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    order = ["old", "new"]
    with tempfile.TemporaryDirectory(prefix="bench-experiment-") as tmp:
        for i in range(args.pairs):
            for name in order if i % 2 == 0 else order[::-1]:
                tree, extra = versions[name]
                r = one_run(tree, Path(tmp) / f"{name}-{i}", args.agents, args.rounds, extra)
                results[name].append(r)
                print(f"{name} run {i}: {r['agent_rounds']} agent-rounds in {r['wall_s']:.0f} s "
                      f"({r['per_hour']:.0f} per hour; median agent-round {r['round_s']:.1f} s: generation "
                      f"{r['gen_s']:.1f} s, training {r['train_s']:.1f} s)", flush=True)
    print("\n| version | runs | agent-rounds per hour (mean) | median agent-round | generation | training |")
    print("|---|---|---|---|---|---|")
    mean = {n: statistics.fmean(r["per_hour"] for r in rs) for n, rs in results.items()}
    for name, rs in results.items():
        print(f"| {name} | {len(rs)} | {mean[name]:.0f} | {statistics.fmean(r['round_s'] for r in rs):.1f} s "
              f"| {statistics.fmean(r['gen_s'] for r in rs):.1f} s | {statistics.fmean(r['train_s'] for r in rs):.1f} s |")
    print(f"\nnew / old agent-rounds per hour: {mean['new'] / mean['old']:.2f}x "
          f"(cost per agent-round {mean['old'] / mean['new']:.2f}x of old's)")


if __name__ == "__main__":
    main()
