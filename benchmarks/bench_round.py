"""A whole `make run` round: today's training step against the one before issue 11, side by side.

    python benchmarks/bench_round.py [--rounds 4] [--pairs 1] [--threads 2]
    python benchmarks/bench_round.py --old /tmp/sapo-old ...   # also an older checkout, e.g. d81a58e

Each run is `sapo-engine run --model smollm2-135m --offline` with the node's defaults (what `make run` does),
a fresh data dir and no held-out evaluation, in rotating order (ref, same, new; same, new, ref; ...) so slow
phases of a shared machine hit all. Versions:
  ref:  this code doing one round's work with the step before issue 11 (every completion re-runs its prompt,
        fp32 weights, checkpointing always: `--no-shared-prefix --train-dtype fp32 --checkpointing always`)
        and dead-slot refilling off
  same: this code's default training step on the same work (refilling off): the issue's round comparison
  new:  the node's full default (refilling on: one more generation batch and more groups trained when
        own groups lack reward spread, issue 12)
  old:  (with --old) an older checkout's defaults; issue 10 changed that round's work too (worked-example
        prompts and answers, the Q8_0 working copy), so it is context, not the speed comparison
The first round of each run is left out (model load, first-call costs). Printed per version: median round
time and its split (generation, scoring, training), tokens trained per second, and ratios to ref (and old).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from versions import same_work  # this folder is the script's: on sys.path

ROOT = Path(__file__).resolve().parents[1]
FLAGS = {
    "ref": ["--no-shared-prefix", "--train-dtype", "fp32", "--checkpointing", "always", "--no-fill-dead-slots"],
    "same": ["--no-fill-dead-slots"],
    "new": [],
    "old": [],
}


def one_run(tree: Path, rounds: int, threads: int, seed: int, work: Path, flags: list[str]) -> list[dict]:
    data, events = work / "data", work / "events.jsonl"
    cmd = [sys.executable, "-m", "engine", "run", "--model", "smollm2-135m", "--offline", "--rounds", str(rounds),
           "--eval-every", "0", "--threads", str(threads), "--seed", str(seed), "--quiet", "--data-dir", str(data),
           "--events", str(events), *same_work(tree, "run", work), *flags]
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: the run failed: {proc.stderr.strip()[-400:]}")
    rows = [json.loads(x) for x in events.read_text().splitlines()]
    return [r for r in rows if r.get("type") == "round"][1:]


def summary(rounds: list[dict]) -> dict[str, float]:
    def med(key: str) -> float:
        vals = [float(r[key]) for r in rounds if r.get(key) is not None]
        return statistics.median(vals) if vals else float("nan")
    tokens = sum(float(r.get("tokens_trained", 0) or 0) for r in rounds)
    train = sum(float(r.get("train_s", 0) or 0) for r in rounds)
    return {"round_s": med("round_s"), "gen_s": med("gen_s"), "score_s": med("score_s"), "train_s": med("train_s"),
            "train_tok_s": tokens / train if train else float("nan"), "rounds": len(rounds)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, help="also time an older checkout of the engine")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per run (the first is left out)")
    ap.add_argument("--pairs", type=int, default=1, help="runs of each version, in rotating order")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--versions", default="ref,same,new", help="which of ref, same, new to run (old: with --old)")
    args = ap.parse_args()
    trees = {who: ROOT for who in args.versions.split(",") if who in FLAGS and who != "old"}
    if args.old:
        trees["old"] = args.old.resolve()
    names = list(trees)
    runs: dict[str, list[dict]] = {who: [] for who in names}
    with tempfile.TemporaryDirectory(prefix="bench-round-") as tmp:
        for pair in range(args.pairs):
            for who in names[pair % len(names):] + names[:pair % len(names)]:
                work = Path(tmp) / f"{who}-{pair}"
                work.mkdir()
                got = one_run(trees[who], args.rounds, args.threads, pair, work, FLAGS[who])
                runs[who] += got
                s = summary(got)
                print(f"run {pair} {who}: median round {s['round_s']:.1f} s (gen {s['gen_s']:.1f}, "
                      f"train {s['train_s']:.1f}), {s['train_tok_s']:.0f} trained tok/s", flush=True)
    res = {who: summary(rows) for who, rows in runs.items()}
    for who, s in res.items():
        print(f"{who}: {s['rounds']} rounds, median round {s['round_s']:.1f} s = gen {s['gen_s']:.1f} + score "
              f"{s['score_s']:.1f} + train {s['train_s']:.1f} (+ the rest); {s['train_tok_s']:.0f} trained tok/s")
    for base in [b for b in ("ref", "old") if b in res]:
        for who in [w for w in ("same", "new") if w in res]:
            print(f"{who} vs {base}: round speedup={res[base]['round_s'] / res[who]['round_s']:.2f} "
                  f"train speedup={res[base]['train_s'] / res[who]['train_s']:.2f}")


if __name__ == "__main__":
    main()
