"""Where the swarm's learning signal comes from, by 10-round span: chain3's supply of groups with reward spread.

Reads committed round records (no model run). Per agent-round: the verified peers' groups the node could choose
from (``external_candidates``), the peers' groups it trained, and the trained groups with spread by source and by
how many of their 4 answers were fully correct (0 correct with spread: format bonus or half credit only).

    python3 docs/results/chain3/supply.py docs/results/chain3 docs/results/chain3-confirm
"""
import collections
import glob
import json
import sys

SPANS = ((1, 10), (11, 20), (21, 30), (31, 40))


def main(runs: list[str]) -> None:
    for config in ("alone", "swarm_useful_fill_drop"):
        print(f"\n{config} ({', '.join(runs)})\n")
        print("| rounds | agent-rounds | candidates | peers' trained | own with spread: 0 / 1 / 2 / 3 correct "
              "| peers' trained: 1 / 2 / 3 correct |")
        print("|---|---|---|---|---|---|")
        for lo, hi in SPANS:
            n, cand, ext, groups = 0, 0, 0, collections.Counter()
            for run in runs:
                for path in sorted(glob.glob(f"{run}/{config}/seed-*/records.jsonl")):
                    for line in open(path):
                        r = json.loads(line)
                        if r.get("type") != "round" or not lo <= r["round"] <= hi:
                            continue
                        n += 1
                        cand += r.get("external_candidates", 0)
                        ext += r.get("external_groups", 0)
                        for g in r.get("group_summaries", []):
                            if g.get("spread"):
                                groups[(g["source"] == "own", g["correct"])] += 1
            own = " / ".join(f"{groups[(True, c)] / n:.2f}" for c in range(4))
            peers = " / ".join(f"{groups[(False, c)] / n:.2f}" for c in (1, 2, 3))
            print(f"| {lo}-{hi} | {n} | {cand / n:.1f} | {ext / n:.2f} | {own} | {peers} |")


if __name__ == "__main__":
    main(sys.argv[1:])
