"""chain3-it2 (two policy updates a round) against chain3-long's seed 1 (one update), rounds 1-30: total reward and
task score per cell, the four ratios, held-out greedy at round 30 paired per agent, gradient norms and the cost of a
round; then the rule's two figures (PLAN.md).

    python3 docs/results/chain3-it2/compare.py
"""
import json
import math
import statistics as st
from pathlib import Path

ROUNDS = 30
CELLS = {"alone, 1 update": "docs/results/chain3-long/alone/seed-1",
         "default, 1 update": "docs/results/chain3-long/swarm_useful_fill_drop/seed-1",
         "alone, 2 updates": "docs/results/chain3-it2/alone/seed-1",
         "default, 2 updates": "docs/results/chain3-it2/swarm_useful_fill_drop/seed-1"}
T975 = {7: 2.365}  # Student's t, 97.5 %, by degrees of freedom (8 agents)


def rounds(cell: str) -> list[dict]:
    path = Path(cell) / "records.jsonl"
    rs = [r for r in map(json.loads, path.read_text().splitlines()) if r.get("type") == "round"]
    return [r for r in rs if r["round"] <= ROUNDS]


def held_out(cell: str) -> dict[int, float]:
    out = {}
    for path in (Path(cell) / "evals").glob(f"agent-*-round-{ROUNDS}.json"):
        out[int(path.name.split("-")[1])] = json.loads(path.read_text())["eval_accuracy"]
    return out


def interval(xs: list[float]) -> str:
    m = st.mean(xs)
    h = T975[len(xs) - 1] * st.stdev(xs) / math.sqrt(len(xs)) if len(xs) in (8,) else float("nan")
    return f"{m:+.3f} [{m - h:+.3f}, {m + h:+.3f}]"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}x" if b else "-"


def main() -> None:
    recs = {name: rounds(cell) for name, cell in CELLS.items()}
    full = {name: len(rs) == 8 * ROUNDS for name, rs in recs.items()}
    total = {name: sum(r["reward_mean"] for r in rs) for name, rs in recs.items()}
    score = {name: sum(r["task_score"] for r in rs) for name, rs in recs.items()}
    print(f"Rounds 1-{ROUNDS}, seed 1, 8 agents (sums over agent-rounds):\n")
    print("| cell | agent-rounds | total reward | task score | accuracy 1-10 / 11-20 / 21-30 "
          "| gradient norm, median (largest) | seconds per agent-round (train) | held-out greedy, round 30 |")
    print("|---|---|---|---|---|---|---|---|")
    for name, rs in recs.items():
        acc = " / ".join(f"{st.mean(r['accuracy'] for r in rs if lo <= r['round'] <= lo + 9):.3f}"
                         if any(lo <= r['round'] <= lo + 9 for r in rs) else "-" for lo in (1, 11, 21))
        norms = [r["grad_norm"] for r in rs if r.get("grad_norm") is not None]
        ho = held_out(CELLS[name])
        print(f"| {name} | {len(rs)} | {total[name]:.1f} | {score[name]:.1f} | {acc} "
              f"| {st.median(norms):.2f} ({max(norms):.2f}) | {st.mean(r['round_s'] for r in rs):.1f} "
              f"({st.mean(r['train_s'] for r in rs):.1f}) | {st.mean(ho.values()):.3f} ({len(ho)} agents) |"
              if rs and norms and ho else f"| {name} | {len(rs)} | {total[name]:.1f} | {score[name]:.1f} | {acc} | - | - | - |")
    print("\nRatios of total reward (task score), rounds 1-30" + ("" if all(full.values()) else "; NOT all cells finished") + ":\n")
    for d in ("default, 1 update", "default, 2 updates"):
        for a in ("alone, 1 update", "alone, 2 updates"):
            print(f"- {d} / {a}: {ratio(total[d], total[a])} ({ratio(score[d], score[a])})")
    for two, one in (("default, 2 updates", "default, 1 update"), ("alone, 2 updates", "alone, 1 update")):
        print(f"- {two} / {one}: {ratio(total[two], total[one])} ({ratio(score[two], score[one])})")
    print("\nHeld-out greedy at round 30, paired per agent [95 % interval over 8 agents]:\n")
    pairs = (("default, 2 updates", "default, 1 update"), ("alone, 2 updates", "alone, 1 update"),
             ("default, 1 update", "alone, 1 update"), ("default, 2 updates", "alone, 2 updates"),
             ("default, 2 updates", "alone, 1 update"))
    for a, b in pairs:
        ha, hb = held_out(CELLS[a]), held_out(CELLS[b])
        agents = sorted(set(ha) & set(hb))
        if len(agents) == 8:
            print(f"- {a} - {b}: {interval([ha[k] - hb[k] for k in agents])}")
        else:
            print(f"- {a} - {b}: {len(agents)} agents evaluated in both, not read")


if __name__ == "__main__":
    main()
