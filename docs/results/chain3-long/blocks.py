"""chain3-long by 20-round block, alone against the default: training accuracy, the node's reward and the task
score (the paper's) per agent-round, and the default's ratio to alone per block and cumulated, per seed and over
the seeds together; then how much of rounds 1-40 repeats chain3's same seed (the same command to 40 rounds) record
for record.

    python3 docs/results/chain3-long/blocks.py [RUN] [CHAIN3] [--seeds 0,1,2]
"""
import argparse
import json
import statistics as st
from pathlib import Path

CONFIGS = {"alone": "alone", "default": "swarm_useful_fill_drop"}
BLOCKS = ((1, 20), (21, 40), (41, 60))


def rounds(run: Path, config: str, seed: int) -> list[dict]:
    path = run / CONFIGS[config] / f"seed-{seed}" / "records.jsonl"
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("type") == "round"]


def sums(rs: list[dict], lo: int, hi: int) -> tuple[int, float, float, float]:
    span = [r for r in rs if lo <= r["round"] <= hi]
    if not span:
        return 0, 0.0, 0.0, 0.0
    return (len(span), st.mean(r["accuracy"] for r in span), sum(r["reward_mean"] for r in span),
            sum(r["task_score"] for r in span))


def table(data: dict[str, list[dict]]) -> None:
    print("| rounds | alone: agent-rounds, accuracy | default: agent-rounds, accuracy | reward, default / alone "
          "| task score, default / alone |")
    print("|---|---|---|---|---|")
    for lo, hi in (*BLOCKS, (1, 40), (1, 60)):
        a, d = sums(data["alone"], lo, hi), sums(data["default"], lo, hi)
        if not a[0] or not d[0]:
            continue
        # ratios of sums over the agent-rounds both have (a cell still running has fewer)
        ratio = f"{d[2] / a[2]:.3f}x" if a[0] == d[0] else f"(unequal: {d[2] / d[0] / (a[2] / a[0]):.3f}x per round)"
        score = f"{d[3] / a[3]:.3f}x" if a[0] == d[0] else f"({d[3] / d[0] / (a[3] / a[0]):.3f}x per round)"
        print(f"| {lo}-{hi} | {a[0]}, {a[1]:.3f} | {d[0]}, {d[1]:.3f} | {ratio} | {score} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", nargs="?", default="docs/results/chain3-long", type=Path)
    ap.add_argument("chain3", nargs="?", default="docs/results/chain3", type=Path)
    ap.add_argument("--seeds", default="0")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    data = {s: {c: rounds(args.run, c, s) for c in CONFIGS} for s in seeds}
    for s in seeds:
        print(f"\nSeed {s}:\n")
        table(data[s])
    if len(seeds) > 1:
        # pooled only over seeds where both cells have every round the other has
        both = [s for s in seeds if len(data[s]["alone"]) == len(data[s]["default"]) and data[s]["alone"]]
        print(f"\nSeeds {', '.join(map(str, both))} together (ratios of sums):\n")
        table({c: [r for s in both for r in data[s][c]] for c in CONFIGS})
    print("\nRounds 1-40 against chain3's same seed (same command to 40 rounds), agent-rounds whose own questions and "
          "reward are the same:")
    for s in seeds:
        for config in CONFIGS:
            old = {(r["agent"], r["round"]): r for r in rounds(args.chain3, config, s)}
            new = [r for r in data[s][config] if (r["agent"], r["round"]) in old]
            same_q = sum(r["own_questions"] == old[(r["agent"], r["round"])]["own_questions"] for r in new)
            same_r = sum(r["reward_mean"] == old[(r["agent"], r["round"])]["reward_mean"] for r in new)
            first = min((r["round"] for r in new if r["reward_mean"] != old[(r["agent"], r["round"])]["reward_mean"]),
                        default=None)
            print(f"- seed {s}, {config}: {len(new)} agent-rounds compared, same questions {same_q}, same reward "
                  f"{same_r}; first round that differs: {first}")


if __name__ == "__main__":
    main()
