"""chain3-l8 against chain3's seed 0, by 10-round span: training accuracy (fully correct answers), task score, own
groups with spread and peers' groups on offer, per agent-round; and the rule's figures for rounds 31-40.

    python3 docs/results/chain3-l8/compare.py
"""
import json
import statistics as st
from pathlib import Path

CELLS = {"alone, 4 answers (chain3)": "docs/results/chain3/alone/seed-0",
         "default, 4 answers (chain3)": "docs/results/chain3/swarm_useful_fill_drop/seed-0",
         "default, 8 answers (chain3-l8)": "docs/results/chain3-l8/swarm_useful_fill_drop/seed-0"}
SPANS = ((1, 10), (11, 20), (21, 30), (31, 40))


def rounds(cell: str) -> list[dict]:
    path = Path(cell) / "records.jsonl"
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("type") == "round"]


def main() -> None:
    print("| cell | rounds | agent-rounds | accuracy | task score | own groups with spread | peers' groups on offer |")
    print("|---|---|---|---|---|---|---|")
    for name, cell in CELLS.items():
        rs = rounds(cell)
        for lo, hi in SPANS:
            span = [r for r in rs if lo <= r["round"] <= hi]
            if not span:
                continue
            own = st.mean(sum(1 for g in r["group_summaries"] if g["source"] == "own" and g["spread"]) for r in span)
            print(f"| {name} | {lo}-{hi} | {len(span)} | {st.mean(r['accuracy'] for r in span):.3f} "
                  f"| {st.mean(r['task_score'] for r in span):.3f} | {own:.2f} "
                  f"| {st.mean(r.get('external_candidates', 0) for r in span):.1f} |")
    print("\nRounds 31-40, per agent (the rule: own groups with spread > 1.18 and accuracy >= 0.60):")
    for name, cell in CELLS.items():
        late = [r for r in rounds(cell) if r["round"] >= 31]
        if not late:
            continue
        agents = sorted({r["agent"] for r in late})
        acc = [st.mean(r["accuracy"] for r in late if r["agent"] == a) for a in agents]
        print(f"- {name}: accuracy {st.mean(acc):.3f} (agents {min(acc):.3f}-{max(acc):.3f}), "
              f"{len(late)} agent-rounds, mean round {st.mean(r['round_s'] for r in late):.1f} s")


if __name__ == "__main__":
    main()
