"""chain3-window: the default at the shipped 600 s sampling window against 3600 s (the whole run), chain3-long's
seed 1, 20 rounds side by side: total reward and task score, peers' groups on offer and trained a round, held-out
greedy at rounds 10 and 20 paired per agent, and how many rounds the 600 s window held (PLAN.md's rule).

    python3 docs/results/chain3-window/compare.py
"""
import json
import math
import statistics as st
from pathlib import Path

CELLS = {"600 s": "docs/results/chain3-window/w600/swarm_useful_fill_drop/seed-1",
         "3600 s": "docs/results/chain3-window/w3600/swarm_useful_fill_drop/seed-1"}
T975 = 2.365  # Student's t, 97.5 %, 7 degrees of freedom (8 agents)


def rounds(cell: str) -> list[dict]:
    path = Path(cell) / "records.jsonl"
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("type") == "round"]


def held_out(cell: str, n: int) -> dict[int, float]:
    return {int(p.name.split("-")[1]): json.loads(p.read_text())["eval_accuracy"]
            for p in (Path(cell) / "evals").glob(f"agent-*-round-{n}.json")}


def main() -> None:
    recs = {name: rounds(cell) for name, cell in CELLS.items()}
    def finished(rs: list[dict]) -> int:  # the last round all 8 agents have finished
        n = 0
        while sum(r["round"] == n + 1 for r in rs) == 8:
            n += 1
        return n

    done = min(finished(rs) for rs in recs.values())
    if done < 2:
        raise SystemExit(f"only {done} round(s) finished in both cells")
    print(f"Rounds 1-{done} (both cells), seed 1, 8 agents:\n")
    print("| window | agent-rounds | total reward | task score | accuracy, first / second half | peers' groups on offer "
          "/ trained a round | seconds a cell-round | held-out greedy, round 10 / 20 |")
    print("|---|---|---|---|---|---|---|---|")
    totals = {}
    for name, rs in recs.items():
        rs = [r for r in rs if r["round"] <= done]
        totals[name] = sum(r["reward_mean"] for r in rs)
        half = done // 2
        acc = [st.mean(r["accuracy"] for r in rs if lo <= r["round"] <= hi) for lo, hi in ((1, half), (half + 1, done))]
        cell_round = sum(r["round_s"] for r in rs) / done
        ho = [held_out(CELLS[name], n) for n in (10, 20)]
        hos = " / ".join(f"{st.mean(h.values()):.3f}" if len(h) == 8 else "-" for h in ho)
        print(f"| {name} | {len(rs)} | {totals[name]:.1f} | {sum(r['task_score'] for r in rs):.1f} "
              f"| {acc[0]:.3f} / {acc[1]:.3f} | {st.mean(r['external_candidates'] for r in rs):.1f} / "
              f"{st.mean(r['external_groups'] for r in rs):.2f} | {cell_round:.0f} | {hos} |")
    print(f"\n- total reward, 3600 s / 600 s: {totals['3600 s'] / totals['600 s']:.3f}x")
    rs = [r for r in recs["600 s"] if r["round"] <= done]
    print(f"- the 600 s window held about {600 / (sum(r['round_s'] for r in rs) / done):.1f} cell-rounds "
          "(600 s over the mean seconds of a cell-round, all 8 agents' turns)")
    for n in (10, 20):
        a, b = held_out(CELLS["3600 s"], n), held_out(CELLS["600 s"], n)
        ks = sorted(set(a) & set(b))
        if len(ks) == 8:
            d = [a[k] - b[k] for k in ks]
            h = T975 * st.stdev(d) / math.sqrt(8)
            print(f"- held-out greedy at round {n}, 3600 s - 600 s: {st.mean(d):+.3f} [{st.mean(d) - h:+.3f}, "
                  f"{st.mean(d) + h:+.3f}] over 8 pairs")


if __name__ == "__main__":
    main()
