"""chain3-rare (peers' groups, the lowest success rate first) against chain3-long's seeds 1 and 2 (the default,
`useful`, and alone), rounds 1-30: total reward and task score per cell, the trained peers' groups by right answers,
held-out greedy at round 30 paired per agent; then the rule's figures (PLAN.md).

    python3 docs/results/chain3-rare/compare.py                         # rounds 1-30, held-out at round 30
    python3 docs/results/chain3-rare/compare.py --rounds 31-60 --eval 60  # the rounds the cells ran on to
"""
import argparse
import json
import math
import statistics as st
from collections import Counter
from pathlib import Path

FIRST, ROUNDS, EVAL = 1, 30, 30  # rounds summed, and the held-out round read (set by the command line)
SEEDS = (1, 2)
CELLS = {"alone": "docs/results/chain3-long/alone/seed-{s}",
         "default (useful)": "docs/results/chain3-long/swarm_useful_fill_drop/seed-{s}",
         "rare": "docs/results/chain3-rare/swarm_rare_fill_drop/seed-{s}"}
T975 = {7: 2.365, 15: 2.131}  # Student's t, 97.5 %, by degrees of freedom (8 or 16 pairs)


def rounds(name: str, seed: int) -> list[dict]:
    path = Path(CELLS[name].format(s=seed)) / "records.jsonl"
    if not path.exists():
        return []
    rs = [r for r in map(json.loads, path.read_text().splitlines()) if r.get("type") == "round"]
    return [r for r in rs if FIRST <= r["round"] <= ROUNDS]


def held_out(name: str, seed: int) -> dict[int, float]:
    out = {}
    for path in (Path(CELLS[name].format(s=seed)) / "evals").glob(f"agent-*-round-{EVAL}.json"):
        out[int(path.name.split("-")[1])] = json.loads(path.read_text())["eval_accuracy"]
    return out


def interval(xs: list[float]) -> str:
    m = st.mean(xs)
    t = T975.get(len(xs) - 1)
    if t is None:
        return f"{m:+.3f} ({len(xs)} pairs)"
    h = t * st.stdev(xs) / math.sqrt(len(xs))
    return f"{m:+.3f} [{m - h:+.3f}, {m + h:+.3f}]"


def peers_by_right(rs: list[dict], lo: int, hi: int) -> str:
    """Trained peers' groups a round by right answers (of 4), rounds lo-hi."""
    sel = [r for r in rs if lo <= r["round"] <= hi]
    c = Counter(g["correct"] for r in sel for g in r["group_summaries"] if g["source"] != "own")
    return " / ".join(f"{c[k] / len(sel):.1f}" for k in (1, 2, 3)) if sel else "-"


def main() -> None:
    global FIRST, ROUNDS, EVAL
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", default="1-30")
    p.add_argument("--eval", type=int, default=30)
    args = p.parse_args()
    FIRST, ROUNDS = (int(x) for x in args.rounds.split("-"))
    EVAL = args.eval
    total: dict[str, float] = Counter()
    print(f"Rounds {FIRST}-{ROUNDS}, 8 agents a seed (sums over agent-rounds):\n")
    print("| seed | cell | agent-rounds | total reward | task score | peers' groups on offer / trained a round "
          f"| trained peers' groups with 1 / 2 / 3 of 4 right, by 10 rounds from {FIRST} | held-out greedy, round {EVAL} |")
    print("|---|---|---|---|---|---|---|---|")
    for s in SEEDS:
        for name in CELLS:
            rs = rounds(name, s)
            if not rs:
                continue
            tot, score = sum(r["reward_mean"] for r in rs), sum(r["task_score"] for r in rs)
            total[name] += tot
            total[name + " score"] += score
            offer = f"{st.mean(r.get('external_candidates', 0) for r in rs):.1f} / {st.mean(r.get('external_groups', 0) for r in rs):.1f}"
            blocks = "; ".join(peers_by_right(rs, lo, lo + 9) for lo in range(FIRST, ROUNDS + 1, 10))
            ho = held_out(name, s)
            print(f"| {s} | {name} | {len(rs)} | {tot:.1f} | {score:.1f} | {offer} | {blocks} "
                  f"| {st.mean(ho.values()):.3f} ({len(ho)} agents) |" if ho else
                  f"| {s} | {name} | {len(rs)} | {tot:.1f} | {score:.1f} | {offer} | {blocks} | - |")
    print("\nOver both seeds: total reward (task score)\n")
    for name in CELLS:
        print(f"- {name}: {total[name]:.1f} ({total[name + ' score']:.1f})")
    d, a, r = "default (useful)", "alone", "rare"
    if total[d] and total[r]:
        print(f"\nRule 1: rare / default = {total[r] / total[d]:.3f}x (asks >= 1.10x), rounds {FIRST}-{ROUNDS}; "
              f"rare / alone = {total[r] / total[a]:.3f}x, default / alone = {total[d] / total[a]:.3f}x")
    print(f"\nHeld-out greedy at round {EVAL}, paired per agent over the seeds that have it [95 % interval]:\n")
    for x, y in ((r, d), (r, a), (d, a)):
        diffs = []
        for s in SEEDS:
            hx, hy = held_out(x, s), held_out(y, s)
            diffs += [hx[k] - hy[k] for k in sorted(set(hx) & set(hy))]
        print(f"- {x} - {y}: {interval(diffs)}" if len(diffs) > 1 else f"- {x} - {y}: not read")


if __name__ == "__main__":
    main()
