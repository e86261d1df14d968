"""A whole `make run` round, today's code against an older checkout, side by side.

    git worktree add --detach /tmp/sapo-old d81a58e        # main before issue 11 (per-sequence fp32 training)
    python benchmarks/bench_round.py --old /tmp/sapo-old [--rounds 4] [--pairs 2] [--threads 2]

Each run is `sapo-engine run --model smollm2-135m --offline` with the node's defaults (what `make run` does),
a fresh data dir, no held-out evaluation (it is not part of a round in either version), run one after the
other in rotating order (old, new, same; new, same, old; ...) so slow phases of a shared machine hit all.
"same" is today's code doing the old code's work per round: dead-slot refilling (a default since issue 12,
one more generation batch and more groups trained when own groups lack reward spread) switched off.
The first round of each run is left out (model load, first-call costs). Printed per version: median round
time and its split (generation, scoring, training), tokens trained per second, and the ratios to old.
Both versions use the same interpreter and packages; only the engine's source differs (PYTHONPATH).
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

ROOT = Path(__file__).resolve().parents[1]


def one_run(tree: Path, rounds: int, threads: int, seed: int, work: Path, no_fill: bool = False) -> list[dict]:
    data, events = work / "data", work / "events.jsonl"
    cmd = [sys.executable, "-m", "engine", "run", "--model", "smollm2-135m", "--offline", "--rounds", str(rounds),
           "--eval-every", "0", "--threads", str(threads), "--seed", str(seed), "--quiet", "--data-dir", str(data),
           "--events", str(events)]
    if no_fill:
        (work / "node.toml").write_text("fill_dead_slots = false\n")
        cmd += ["--config", str(work / "node.toml")]
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
    ap.add_argument("--old", type=Path, required=True, help="a checkout of the older engine")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per run (the first is left out)")
    ap.add_argument("--pairs", type=int, default=2, help="runs of each version, in rotating order")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    trees = {"old": args.old.resolve(), "new": ROOT, "same": ROOT}
    runs: dict[str, list[dict]] = {"old": [], "new": [], "same": []}
    with tempfile.TemporaryDirectory(prefix="bench-round-") as tmp:
        for pair in range(args.pairs):
            order = ["old", "new", "same"][pair % 3:] + ["old", "new", "same"][:pair % 3]
            for who in order:
                work = Path(tmp) / f"{who}-{pair}"
                work.mkdir()
                got = one_run(trees[who], args.rounds, args.threads, seed=pair, work=work, no_fill=who == "same")
                runs[who] += got
                s = summary(got)
                print(f"pair {pair} {who}: median round {s['round_s']:.1f} s (gen {s['gen_s']:.1f}, "
                      f"train {s['train_s']:.1f}), {s['train_tok_s']:.0f} trained tok/s", flush=True)
    res = {who: summary(rows) for who, rows in runs.items()}
    for who, s in res.items():
        print(f"{who}: {s['rounds']} rounds, median round {s['round_s']:.1f} s = gen {s['gen_s']:.1f} + score "
              f"{s['score_s']:.1f} + train {s['train_s']:.1f} (+ the rest); {s['train_tok_s']:.0f} trained tok/s")
    for who in ("same", "new"):
        print(f"{who}: round speedup={res['old']['round_s'] / res[who]['round_s']:.2f} "
              f"train speedup={res['old']['train_s'] / res[who]['train_s']:.2f} "
              f"train tok/s ratio={res[who]['train_tok_s'] / res['old']['train_tok_s']:.2f}")


if __name__ == "__main__":
    main()
