"""chain3-rare3: `rare` against the default (`useful`) and alone on seeds 6, 7 and 8, 40 rounds: the rule's
figures (PLAN.md), from the committed records. Only finished cells (8 agents x 40 rounds, held-out at round 40)
count in the sums; a cell still running is listed as such.

    python3 docs/results/chain3-rare3/compare.py
"""
import json
import math
import statistics as st
from pathlib import Path

HERE = Path(__file__).parent
SEEDS = (6, 7, 8)
AGENTS, ROUNDS = 8, 40
CELLS = {"alone": "main/alone/seed-{s}",
         "default": "main/swarm_useful_fill_drop/seed-{s}",
         "rare": "rare/swarm_rare_fill_drop/seed-{s}"}
T975 = {7: 2.365, 15: 2.131, 23: 2.069}  # Student's t, 97.5 %, by degrees of freedom (8, 16 or 24 pairs)


def records(name: str, seed: int) -> list[dict]:
    path = HERE / CELLS[name].format(s=seed) / "records.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:  # a torn last line while the cell runs
            continue
        if r.get("type") == "round":
            rows.append(r)
    return rows


def finished(name: str, seed: int) -> bool:
    return (HERE / CELLS[name].format(s=seed) / "done.json").exists()


def held_out(name: str, seed: int, at: int) -> dict[int, float]:
    """Greedy held-out accuracy per agent after round ``at`` (0: the start, shared by every configuration)."""
    if at == 0:
        files = (HERE / CELLS[name].format(s=seed)).parent.parent / "start" / f"seed-{seed}"
        found = files.glob("agent-*.json")
    else:
        found = (HERE / CELLS[name].format(s=seed) / "evals").glob(f"agent-*-round-{at}.json")
    return {int(p.name.split("-")[1].split(".")[0]): json.loads(p.read_text())["eval_accuracy"] for p in found}


def interval(xs: list[float]) -> str:
    m = st.mean(xs)
    t = T975.get(len(xs) - 1)
    if t is None:
        return f"{m:+.3f} ({len(xs)} pairs)"
    h = t * st.stdev(xs) / math.sqrt(len(xs))
    return f"{m:+.3f} [{m - h:+.3f}, {m + h:+.3f}] ({len(xs)} pairs)"


def paired(x: str, y: str, seeds: list[int], at: int) -> list[float]:
    out = []
    for s in seeds:
        hx, hy = held_out(x, s, at), held_out(y, s, at)
        out += [hx[k] - hy[k] for k in sorted(set(hx) & set(hy))]
    return out


def main() -> None:
    print("Per cell (sums over agent-rounds; held-out greedy, mean over agents):\n")
    print("| seed | cell | agent-rounds | total reward | task score | held-out start | round 20 | round 40 |")
    print("|---|---|---|---|---|---|---|---|")
    done: dict[str, list[int]] = {name: [] for name in CELLS}
    total: dict[tuple[str, int], tuple[float, float]] = {}
    for s in SEEDS:
        for name in CELLS:
            rs = records(name, s)
            if not rs:
                continue
            tot, score = sum(r["reward_mean"] for r in rs), sum(r["task_score"] for r in rs)
            ho = [held_out(name, s, at) for at in (0, 20, 40)]
            cols = " | ".join(f"{st.mean(h.values()):.3f}" if h else "-" for h in ho)
            state = "" if finished(name, s) else f" (running, to round {max(r['round'] for r in rs)})"
            print(f"| {s} | {name}{state} | {len(rs)} | {tot:.1f} | {score:.1f} | {cols} |")
            if finished(name, s) and len(rs) == AGENTS * ROUNDS:
                done[name].append(s)
                total[(name, s)] = (tot, score)

    def ratio(x: str, y: str, column: int) -> tuple[str, list[int]]:
        seeds = [s for s in SEEDS if s in done[x] and s in done[y]]
        if not seeds:
            return "not read (no seed has both finished)", seeds
        a = sum(total[(x, s)][column] for s in seeds)
        b = sum(total[(y, s)][column] for s in seeds)
        per = ", ".join(f"{total[(x, s)][column] / total[(y, s)][column]:.3f}" for s in seeds)
        return f"{a / b:.3f}x (seeds {','.join(map(str, seeds))}: {per})", seeds

    print("\nTotals over the seeds where both cells finished (node's reward; task score, the paper's reward):\n")
    for x, y in (("rare", "default"), ("default", "alone"), ("rare", "alone")):
        node, _ = ratio(x, y, 0)
        paper, _ = ratio(x, y, 1)
        print(f"- {x} / {y}: {node}; task score {paper}")
    print("\nHeld-out greedy, paired per agent [95 % interval over pairs]:\n")
    for x, y in (("rare", "default"), ("rare", "alone"), ("default", "alone")):
        seeds = [s for s in SEEDS if s in done[x] and s in done[y]]
        for at in (20, 40):
            diffs = paired(x, y, seeds, at)
            print(f"- {x} - {y}, round {at}: {interval(diffs)}" if len(diffs) > 1 else f"- {x} - {y}, round {at}: not read")
    both = [s for s in SEEDS if s in done["rare"] and s in done["default"]]
    if both:
        diffs = paired("rare", "default", both, 40)
        m = st.mean(diffs)
        t = T975.get(len(diffs) - 1)
        lo = m - t * st.stdev(diffs) / math.sqrt(len(diffs)) if t else float("nan")
        node = sum(total[("rare", s)][0] for s in both) / sum(total[("default", s)][0] for s in both)
        held = m >= 0.02 and lo > 0
        print(f"\nRule 1 over seeds {','.join(map(str, both))} ({len(diffs)} pairs): held-out at round 40 {m:+.3f}, "
              f"lower bound {lo:+.4f} (asks >= +0.02 and > 0): {'yes' if held else 'no'}; total reward "
              f"{node:.3f}x the default's (asks >= 0.97x): {'yes' if node >= 0.97 else 'no'}"
              + ("" if len(both) == len(SEEDS) else " -- not all three seeds yet: no decision"))


if __name__ == "__main__":
    main()
