"""chain3's held-out questions split by the kind of answer: which ones sharing helped.

Reads the committed held-out records (per-question greedy and sampled outcomes) of docs/results/chain3 and
regenerates each seed's held-out set to learn each question's answer. Prints a markdown table per seed:
greedy / sampled accuracy at the start, round 20 and round 40, alone beside the default, for
answers below 0, 0-9 and 10 or more, with or without a minus sign in the question.

    PYTHONPATH=. .venv/bin/python docs/results/chain3/by_answer.py docs/results/chain3 --seeds 0,1,2

mixed-chain3 (20 rounds, two models): ``--rounds 10,20 --model gemma`` (or ``smollm2``) keeps the agents whose
eval records name that model.
"""
import argparse, collections, glob, json, tomllib
from pathlib import Path

from engine.tasks.questions import build_mix, heldout_set, question_key

KINDS = ("below 0", "0-9, with -", "0-9, only +", "10+, with -", "10+, only +")


def kind(q) -> str:
    a = int(q.answer)
    if a < 0:
        return "below 0"
    return ("0-9" if a < 10 else "10+") + (", with -" if " - " in q.question else ", only +")


def outcomes(files: list[str], by_key: dict, model: str = "") -> dict[str, list[float]]:
    """kind -> [greedy correct, sampled correct (of 2), questions] summed over the agents' files (of ``model``)."""
    out = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for f in files:
        record = json.load(open(f))
        if model not in record.get("model", ""):
            continue
        for key, greedy, sampled in record["per_question"]:
            row = out[kind(by_key[key])]
            row[0] += greedy
            row[1] += sampled / 2
            row[2] += 1
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("run", type=Path)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--rounds", default="20,40", help="the evaluated rounds to show beside the start")
    p.add_argument("--model", default="", help="only agents whose model name contains this")
    args = p.parse_args()
    task_config = tomllib.loads((args.run / "chain3.toml").read_text())["task_config"]
    mix = build_mix("easy", ["chain_sum"], None, task_config)
    for seed in [int(s) for s in args.seeds.split(",")]:
        qs = heldout_set(mix, 128, seed + 1)
        by_key = {question_key(q): q for q in qs}
        share = collections.Counter(kind(q) for q in qs)
        cells = {"start": outcomes(sorted(glob.glob(f"{args.run}/start/seed-{seed}/agent-*.json")), by_key, args.model)}
        for config, name in (("alone", "alone"), ("swarm_useful_fill_drop", "default"), ("swarm_rare_fill_drop", "rare")):
            for r in [int(r) for r in args.rounds.split(",")]:
                files = sorted(glob.glob(f"{args.run}/{config}/seed-{seed}/evals/agent-*-round-{r}.json"))
                if files:
                    cells[f"{name} r{r}"] = outcomes(files, by_key, args.model)
        agents = f"the {args.model} agents" if args.model else "8 agents"
        print(f"\nseed {seed} (greedy / sampled accuracy over {agents}; share of the 128 questions)\n")
        print("| answer | share | " + " | ".join(cells) + " |")
        print("|---|---|" + "---|" * len(cells))
        for k in KINDS:
            row = [f"{c[k][0] / c[k][2]:.2f} / {c[k][1] / c[k][2]:.2f}" if c[k][2] else "-" for c in cells.values()]
            print(f"| {k} | {share[k] / len(qs):.2f} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
