"""A 95 % bootstrap interval for a configuration's total reward as a ratio of alone's (ratio of sums over pairs).

The report gives the paired difference's interval; the issue's targets are ratios, so this reads the same records
and resamples them: seeds first (agents of one swarm share groups, so they are not independent), then the pairs
within each drawn seed. With 3-6 seeds the interval is coarse; it says how close to a target a ratio is, not more.

    PYTHONPATH=. .venv/bin/python docs/results/chain3/ratio_interval.py docs/results/chain3 docs/results/chain3-confirm \
        [--config swarm+useful+fill+drop] [--field task_score] [--model gemma] [--seeds 0,1,2]

--field: a per-round figure of the records, summed over rounds: reward_mean (the node's reward, with the format
bonus) or task_score (reasoning-gym's score alone, the reward the paper sums).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from engine.errors import SapoError
from engine.lab.report import Key, agent_field_totals, load_runs, only_seeds


def ratio(pairs: list[Key], tot: dict[Key, float], base: dict[Key, float]) -> float:
    return sum(tot[k] for k in pairs) / sum(base[k] for k in pairs)


def bootstrap(keys: list[Key], tot: dict[Key, float], base: dict[Key, float], draws: int, rng: random.Random
              ) -> list[float]:
    by_seed: dict[int, list[Key]] = {}
    for k in keys:
        by_seed.setdefault(k[0], []).append(k)
    seeds = sorted(by_seed)
    out = []
    for _ in range(draws):
        sample = [rng.choice(by_seed[s]) for s in (rng.choice(seeds) for _ in seeds) for _ in by_seed[s]]
        out.append(ratio(sample, tot, base))
    return sorted(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--config", default="swarm+useful+fill+drop")
    ap.add_argument("--baseline", default="alone")
    ap.add_argument("--field", default="task_score")
    ap.add_argument("--model", help="only agents whose model name contains this")
    ap.add_argument("--seeds", help="comma-separated; default: all")
    ap.add_argument("--draws", type=int, default=20000)
    args = ap.parse_args()
    try:
        records, evals = load_runs(args.runs)
        if args.seeds:
            records, _ = only_seeds(records, evals, {int(s) for s in args.seeds.split(",")})
    except SapoError as exc:
        raise SystemExit(f"ratio_interval.py: {exc}") from None
    if args.model:  # a part of the name ("gemma"), where the report's only_model wants it whole
        records = [r for r in records if args.model in str(r.get("model", ""))]
    tot = agent_field_totals(records, args.config, args.field)
    base = agent_field_totals(records, args.baseline, args.field)
    keys = sorted(set(tot) & set(base))
    if not keys:
        raise SystemExit(f"no pairs of {args.config} and {args.baseline} with {args.field} in every round")
    draws = bootstrap(keys, tot, base, args.draws, random.Random(0))
    lo, hi = draws[int(0.025 * len(draws))], draws[int(0.975 * len(draws)) - 1]
    seeds = sorted({k[0] for k in keys})
    per_seed = ", ".join(f"{ratio([k for k in keys if k[0] == s], tot, base):.3f}" for s in seeds)
    print(f"{args.config} / {args.baseline}, {args.field}, {len(keys)} pairs over seeds {seeds}"
          f"{' (' + args.model + ')' if args.model else ''}: {ratio(keys, tot, base):.3f}x "
          f"[{lo:.3f}, {hi:.3f}] (per seed {per_seed})")


if __name__ == "__main__":
    main()
