"""``sapo-engine experiment report RUN_DIR...``: the paper's table and Figure 2 from an experiment's records.

Per configuration, over its seeds (cells ``<config>/seed-<s>`` of engine/lab/experiment.py):
- total reward: the sum over agents and rounds of each agent's mean reward on its own samples
  (the paper's measure), its mean over seeds and the min-max across seeds;
- the ratio of that mean to the isolated baseline (``alone``, else the first configuration), and
  the min-max of the per-seed ratios (seed s against the baseline's seed s);
- groups trained per round, external groups among them;
- held-out greedy pass@1 and sampled accuracy at the end (mean over agents and seeds);
- reward per round beside reward per hour of compute (the same reward over the agents' round time).
The plot: per configuration, the moving average of reward per round, mean over agents and seeds,
with a band from the lowest to the highest agent.

Then the paired comparison (configurations are paired within a seed, engine/lab/experiment.py):
per configuration against the baseline, the mean over (seed, agent) pairs of the difference in
total reward and in held-out accuracy at the end, each with a 95 % t interval over those pairs,
beside the held-out change since the start; per task, the held-out difference to the baseline;
the same by span of rounds (``phases``: when sharing helped or hurt); how many rounds each configuration took
to reach the baseline's final reward (``catch_up``); and what the runs cost (agent-rounds, compute hours of
rounds and evaluations).
Several runs report together: a configuration run again with one setting changed (another ``--out``,
another ``--lr``) is named by the change and paired like any other (``load_runs``).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from engine.errors import SapoError
from engine.lab.experiment import read_records


@dataclass(frozen=True)
class Row:
    config: str
    seeds: int
    agents: int
    rounds: int
    total: float  # mean over seeds
    total_min: float
    total_max: float
    ratio: float | None  # to the baseline's mean total
    ratio_min: float | None  # per seed, paired with the baseline's same seed
    ratio_max: float | None
    trained_per_round: float
    external_per_round: float
    reward_per_round: float
    reward_per_hour: float | None
    eval_greedy: float | None
    eval_sampled: float | None
    complete: bool


# Two-sided 95 % quantiles of Student's t by degrees of freedom; between rows the smaller df's
# (wider) value is used. Written out: scipy would be a large dependency for fifteen numbers.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


def t975(df: int) -> float:
    if df < 1:
        raise ValueError("an interval needs at least two pairs")
    return T975[max(k for k in T975 if k <= df)] if df <= 120 else 1.960


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float
    n: int

    def text(self, digits: int = 3) -> str:
        if self.n < 2:
            return f"{self.mean:+.{digits}f} (n={self.n})"
        return f"{self.mean:+.{digits}f} [{self.lo:+.{digits}f}, {self.hi:+.{digits}f}]"


def paired_interval(diffs: list[float]) -> Interval | None:
    """Mean of paired differences with its 95 % t interval (none for no pairs; no width for one)."""
    if not diffs:
        return None
    m = statistics.fmean(diffs)
    if len(diffs) < 2:
        return Interval(m, m, m, 1)
    half = t975(len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return Interval(m, m - half, m + half, len(diffs))


def _cell_settings(cell: Path) -> dict[str, Any]:
    """A cell's settings as its meta.json keeps them."""
    meta = cell / "meta.json"
    if not meta.exists():
        return {}
    data = json.loads(meta.read_text())
    return data.get("settings", {}) | {"models": data.get("models")}


def held_out_so_far(cell: Path, seed: int) -> dict[str, Any] | None:
    """An unfinished cell's held-out results as far as they went, shaped like its ``done.json`` with ``partial``:
    the end evaluations of the agents that have one (a session that ended while they ran: the agents'
    checkpoints stay behind on that machine, so no other machine can finish them), the middle ones, and the
    seed's start evaluations. None when no agent reached its end evaluation."""
    meta = cell / "meta.json"
    if not meta.exists():
        return None
    from engine.lab.experiment import middle_round

    data = json.loads(meta.read_text())
    if "rounds" not in data or "agents" not in data:
        return None
    planned, agents = int(data["rounds"]), int(data["agents"])

    def at(n: int | None) -> dict[str, Any]:
        if n is None:
            return {}
        paths = {str(k): cell / "evals" / f"agent-{k}-round-{n}.json" for k in range(agents)}
        return {k: json.loads(p.read_text()) for k, p in paths.items() if p.exists()}

    end = at(planned)
    if not end:
        return None
    start_dir = cell.parent.parent / "start" / f"seed-{seed}"
    start = {str(k): json.loads(p.read_text()) for k in range(agents)
             if (p := start_dir / f"agent-{k}.json").exists()}
    return {"seed": seed, "rounds": planned, "eval": end, "eval_middle": at(middle_round(planned)),
            "eval_start": start, "partial": {"agents": len(end), "of": agents}}


PER_SEED = {"seed", "heldout_draw"}  # settings a run varies by seed (``--heldout-per-seed``), not by design
# Settings that change how fast a cell runs, not what it learns (engine/config.py's resource and training-speed
# settings; micro-batches are exact, and bf16 moves token log-probs by <= 0.002 nats against fp32,
# docs/BENCHMARKS.md). A cell that differs from its configuration only in these stays in it, and the report
# names the cell and the difference ("ran with"): `auto` already trains in fp32 on one machine and bf16 on
# another, so a cell made to match its seed's machine (--train-dtype fp32 on a bf16 one) is the same design.
SPEED = {"threads", "cpu_limit", "priority", "schedule", "pause_on_battery", "max_other_cpu", "train_dtype", "checkpointing",
         "shared_prefix", "train_memory_mb", "micro_batch", "device", "gpu_layers"}


ROUND_KEYS = ("config", "seed", "agent", "round", "reward_mean")  # what every reading of a round record needs


def load_runs(dirs: Iterable[Path]) -> tuple[list[dict[str, Any]], dict[tuple[str, int], dict[str, Any]]]:
    """Every round record under the directories, and each finished cell's held-out results by (config, seed).

    Runs of one design with one setting changed (``--lr`` in another ``--out``) can be reported together: a
    configuration whose settings differ from the same configuration's in the first directory that has it is
    named with the difference, ``alone [learning_rate 0.0002]``, and paired like any other configuration. The
    same cell found twice with the same settings is an error: its rounds would count twice."""
    records: list[dict[str, Any]] = []
    evals: dict[tuple[str, int], dict[str, Any]] = {}
    # The settings each configuration is compared with: the same cell's, else (a seed the first run lacks)
    # the configuration's, less what differs by seed; both from the first directory that has them.
    first_cell: dict[tuple[str, int], dict[str, Any]] = {}
    first_config: dict[str, dict[str, Any]] = {}
    where: dict[tuple[str, int], Path] = {}
    read: set[Path] = set()
    found = False
    for d in dirs:
        if not d.is_dir():
            raise SapoError(f"not a directory: {d}")
        for path in sorted(d.rglob("records.jsonl")):
            if "superseded" in path.relative_to(d).parts:  # a lost run's rounds, rerun since (engine/lab/experiment.py)
                continue
            cell = path.parent.resolve()
            if cell in read:  # directories that overlap (a run and one of its cells): read each cell once
                continue
            read.add(cell)
            rounds = [r for r in read_records(path) if r.get("type") == "round"]
            if not rounds:
                continue
            found = True
            for r in rounds:
                if missing := [k for k in ROUND_KEYS if k not in r]:
                    raise SapoError(f"{path}: a round record without {', '.join(missing)}: not an experiment's records")
            config, seed = rounds[0]["config"], int(rounds[0]["seed"])
            settings = _cell_settings(path.parent)
            if (config, seed) in first_cell:
                base = first_cell[(config, seed)]
            elif config in first_config:
                base = {k: v for k, v in first_config[config].items() if k not in PER_SEED}
            else:
                base = settings
            first_cell.setdefault((config, seed), settings)
            first_config.setdefault(config, settings)
            differs = {k: v for k, v in settings.items() if k in base and base[k] != v}
            changed = [f"{k} {v}" for k, v in differs.items() if k not in SPEED]
            ran_with = ", ".join(f"{k} {v}" for k, v in differs.items() if k in SPEED)
            name = f"{config} [{', '.join(changed)}]" if changed else config
            if where.setdefault((name, seed), cell) != cell:
                raise SapoError(f"{name} seed {seed} is both in {where[(name, seed)]} and in {cell} with the same "
                                "settings: report one of them")
            records += [r | {"config": name} | ({"ran_with": ran_with} if ran_with else {}) for r in rounds]
            done = path.parent / "done.json"
            if done.exists():
                data = json.loads(done.read_text())
                evals[(name, int(data["seed"]))] = data | {"config": name}
            elif so_far := held_out_so_far(path.parent, seed):
                evals[(name, seed)] = so_far | {"config": name}
    if not found:
        raise SapoError(f"no experiment records (records.jsonl with a round) under {', '.join(map(str, dirs))}")
    return records, evals


def table(records: list[dict[str, Any]], evals: dict[tuple[str, int], dict[str, Any]],
          baseline: str | None = None) -> list[Row]:
    by_cell: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_cell[(r["config"], int(r["seed"]))].append(r)
    configs = list(dict.fromkeys(c for c, _ in sorted(by_cell, key=lambda k: (k[0] != "alone", k))))
    base = baseline or ("alone" if "alone" in configs else configs[0])
    totals = {cell: sum(r["reward_mean"] for r in rs) for cell, rs in by_cell.items()}
    base_mean = _mean([t for (c, _), t in totals.items() if c == base])
    rows = []
    for config in configs:
        cells = sorted(s for c, s in by_cell if c == config)
        ts = [totals[(config, s)] for s in cells]
        rs = [r for s in cells for r in by_cell[(config, s)]]
        paired = [totals[(config, s)] / totals[(base, s)] for s in cells if totals.get((base, s))]
        full = _detailed(rs)
        hours = sum(r.get("round_s", 0.0) for r in full) / 3600
        ev = [a for s in cells if (config, s) in evals for a in evals[(config, s)]["eval"].values()]
        total = _mean(ts)
        rows.append(Row(
            config=config, seeds=len(cells), agents=len({r["agent"] for r in rs}),
            rounds=max(r["round"] for r in rs), total=total, total_min=min(ts), total_max=max(ts),
            ratio=total / base_mean if base_mean else None,
            ratio_min=min(paired) if paired else None, ratio_max=max(paired) if paired else None,
            trained_per_round=_mean([r.get("groups_trained", 0) for r in full]),
            external_per_round=_mean([r.get("external_groups", 0) for r in full]),
            reward_per_round=_mean([r["reward_mean"] for r in rs]),
            reward_per_hour=sum(r["reward_mean"] for r in full) / hours if hours > 0 else None,
            eval_greedy=_mean([a["eval_accuracy"] for a in ev]) if ev else None,
            eval_sampled=_mean([a["eval_sampled_accuracy"] for a in ev]) if ev else None,
            complete=all((config, s) in evals and "partial" not in evals[(config, s)] for s in cells),
        ))
    return rows


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else 0.0


def _f(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def format_table(rows: list[Row]) -> str:
    head = ("| configuration | seeds x agents x rounds | total reward (min-max over seeds) | vs alone (per seed) "
            "| groups trained / round (external) | reward / round | reward / compute hour "
            "| held-out greedy | held-out sampled |\n|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x ({_f(r.ratio_min, 2)}-{_f(r.ratio_max, 2)})"
        lines.append(f"| {r.config}{'' if r.complete else ' (incomplete)'} | {r.seeds} x {r.agents} x {r.rounds} "
                     f"| {r.total:.2f} ({r.total_min:.2f}-{r.total_max:.2f}) | {ratio} "
                     f"| {r.trained_per_round:.2f} ({r.external_per_round:.2f}) | {r.reward_per_round:.3f} "
                     f"| {_f(r.reward_per_hour, 1)} | {_f(r.eval_greedy)} | {_f(r.eval_sampled)} |")
    return head + "\n".join(lines) + "\n"


Key = tuple[int, int]  # (seed, agent)


def agent_totals(records: list[dict[str, Any]], config: str) -> dict[Key, float]:
    """Total reward (sum over rounds of the mean reward on its own samples) per (seed, agent)."""
    out: dict[Key, float] = defaultdict(float)
    for r in records:
        if r["config"] == config:
            out[(int(r["seed"]), int(r["agent"]))] += r["reward_mean"]
    return dict(out)


def _detailed(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Round records with the round's details. A record recovered from a checkpoint's history (its line lost
    after a kill) carries the round's reward, accuracy and format only: counts and times leave it out."""
    return [r for r in records if not r.get("recovered")]


def agent_field_totals(records: list[dict[str, Any]], config: str, name: str) -> dict[Key, float]:
    """Total over rounds of a round figure per (seed, agent); only agents whose every round carries it (older
    records, or a round recovered from a checkpoint's history, may not)."""
    out: dict[Key, float] = defaultdict(float)
    missing: set[Key] = set()
    for r in records:
        if r["config"] == config:
            key = (int(r["seed"]), int(r["agent"]))
            if r.get(name) is None:
                missing.add(key)
            else:
                out[key] += r[name]
    return {k: v for k, v in out.items() if k not in missing}


def agent_paired_totals(records: list[dict[str, Any]], config: str) -> dict[Key, float]:
    """Total over rounds of the reward on the main stream's questions (``paired_reward_mean``), the same
    questions in every configuration."""
    return agent_field_totals(records, config, "paired_reward_mean")


def _ratio_of_sums(tot: dict[Key, float], base: dict[Key, float]) -> tuple[Interval | None, float | None]:
    """Paired difference and ratio of sums over the pairs both sides have."""
    keys = sorted(set(tot) & set(base))
    base_sum = sum(base[k] for k in keys)
    return (paired_interval([tot[k] - base[k] for k in keys]),
            sum(tot[k] for k in keys) / base_sum if base_sum else None)


def agent_evals(evals: dict[tuple[str, int], dict[str, Any]], config: str, when: str = "eval") -> dict[Key, dict]:
    """Held-out results per (seed, agent) of finished cells: ``eval`` (end), ``eval_middle``, ``eval_start``."""
    return {(seed, int(a)): e for (c, seed), data in evals.items() if c == config
            for a, e in data.get(when, {}).items()}


@dataclass(frozen=True)
class Paired:
    config: str
    pairs: int
    total_diff: Interval | None  # total reward minus the baseline's, per (seed, agent)
    total_ratio: float | None  # sum over pairs of totals over the baseline's
    same_questions_diff: Interval | None  # total reward on the main stream's questions minus the baseline's
    greedy_change: Interval | None  # end minus start, this configuration alone (not paired)
    greedy_diff: Interval | None  # end minus the baseline's end, per (seed, agent)
    sampled_diff: Interval | None
    middle_greedy_diff: Interval | None
    per_task: dict[str, Interval]  # end greedy minus the baseline's, per task
    # End greedy minus the baseline's with the interval taken over held-out questions (each question's
    # difference averaged over the pairs): every agent answers the same questions, so the interval over
    # pairs says how sure the difference is on these questions, this one how sure it is on others like them.
    greedy_diff_by_question: Interval | None = None
    # End greedy minus the baseline's per seed, the interval over that seed's agents: the seeds' spread is most
    # of the interval over pairs when they disagree (run 13: +0.006, +0.024, +0.062).
    greedy_diff_by_seed: dict[int, Interval] = field(default_factory=dict)
    # The same totals without the node's format bonus (reasoning-gym's score alone: the reward the paper sums,
    # which has no format term), and of fully correct answers. The bonus is earned alike once both configurations
    # write the tag, so it pulls the reward ratio toward 1.
    score_diff: Interval | None = None
    score_ratio: float | None = None
    correct_ratio: float | None = None


def by_question(end: dict[Any, dict[str, Any]], base: dict[Any, dict[str, Any]], keys: list[Any]) -> Interval | None:
    """Per held-out question, the mean over the pairs that answered it of (greedy correct - the baseline's); the
    interval over questions.

    Only pairs whose evaluations both list their questions (``per_question``, engine/run/evaluate.py). With one
    held-out set every pair answers every question; with a set per seed (``--heldout-per-seed``) each question
    is averaged over its seed's pairs, and the interval is over all the seeds' questions."""
    per_q: dict[Any, list[int]] = defaultdict(list)
    for k in keys:
        mine, theirs = end[k].get("per_question"), base[k].get("per_question")
        if mine and theirs:
            b = {q: g for q, g, _ in theirs}
            for q, g, _ in mine:
                if q in b:
                    per_q[q].append(g - b[q])
    if not per_q:
        return None
    return paired_interval([statistics.fmean(per_q[q]) for q in sorted(per_q)])


def partners(mine: dict[Key, dict], theirs: dict[Key, dict[int | None, dict]],
             fallback: dict[Key, dict]) -> dict[Key, dict]:
    """For each of ``mine``'s held-out results, the baseline's result of the same pair at the same round
    (``theirs``: the baseline's results by pair and round), so that runs of different lengths compare like with
    like: a 30-round run's end with a 60-round baseline's middle, never with its end. A result without its round
    (records older than the round field) takes ``fallback``'s, as every run was then the same length."""
    out = {}
    for k, e in mine.items():
        partner = fallback.get(k) if e.get("round") is None else theirs.get(k, {}).get(e["round"])
        if partner is not None:
            out[k] = partner
    return out


def evals_by_round(evals: dict[tuple[str, int], dict[str, Any]], config: str) -> dict[Key, dict[int | None, dict]]:
    """A configuration's held-out results (middle and end) by pair and by the round they were taken after."""
    out: dict[Key, dict[int | None, dict]] = defaultdict(dict)
    for when in ("eval_middle", "eval"):
        for k, e in agent_evals(evals, config, when).items():
            out[k][e.get("round")] = e
    return out


def _rounds(records: list[dict[str, Any]], config: str) -> set[tuple[int, int, int]]:
    return {(r["seed"], r["agent"], r["round"]) for r in records if r["config"] == config}


def paired(records: list[dict[str, Any]], evals: dict[tuple[str, int], dict[str, Any]],
           baseline: str = "alone") -> list[Paired]:
    """Every configuration against the baseline, pair by pair (same seed, same agent)."""
    configs = list(dict.fromkeys(r["config"] for r in records))
    if baseline not in configs:
        return []
    base_by_round = evals_by_round(evals, baseline)
    base_end, base_mid = agent_evals(evals, baseline), agent_evals(evals, baseline, "eval_middle")
    out = []
    for config in configs:
        if config == baseline:
            continue
        # Unfinished cells: each pair is summed over the rounds both of its agents have finished.
        both = _rounds(records, config) & _rounds(records, baseline)
        common = [r for r in records if (r["seed"], r["agent"], r["round"]) in both]
        tot, base_t = agent_totals(common, config), agent_totals(common, baseline)
        keys = sorted(set(tot) & set(base_t))
        end, mid, start = agent_evals(evals, config), agent_evals(evals, config, "eval_middle"), \
            agent_evals(evals, config, "eval_start")
        # Each result against the baseline's at the same round (runs of different lengths: a 30-round run's end
        # is paired with a 60-round baseline's middle).
        base_e, base_m = partners(end, base_by_round, base_end), partners(mid, base_by_round, base_mid)
        ek, mk = sorted(base_e), sorted(base_m)
        tasks = sorted({t for k in ek for t in end[k].get("per_task", {}) if t in base_e[k].get("per_task", {})})
        total_diff, total_ratio = _ratio_of_sums(tot, base_t)
        greedy = {k: end[k]["eval_accuracy"] - base_e[k]["eval_accuracy"] for k in ek}
        same, base_same = agent_paired_totals(common, config), agent_paired_totals(common, baseline)
        score_diff, score_ratio = _ratio_of_sums(agent_field_totals(common, config, "task_score"),
                                                 agent_field_totals(common, baseline, "task_score"))
        _, correct_ratio = _ratio_of_sums(agent_field_totals(common, config, "accuracy"),
                                          agent_field_totals(common, baseline, "accuracy"))
        out.append(Paired(
            config=config, pairs=len(keys),
            total_diff=total_diff, total_ratio=total_ratio,
            same_questions_diff=paired_interval([same[k] - base_same[k] for k in sorted(set(same) & set(base_same))]),
            greedy_change=paired_interval([end[k]["eval_accuracy"] - start[k]["eval_accuracy"]
                                           for k in sorted(set(end) & set(start))]),
            greedy_diff=paired_interval(list(greedy.values())),
            sampled_diff=paired_interval([end[k]["eval_sampled_accuracy"] - base_e[k]["eval_sampled_accuracy"]
                                          for k in ek]),
            middle_greedy_diff=paired_interval([mid[k]["eval_accuracy"] - base_m[k]["eval_accuracy"] for k in mk]),
            per_task={t: iv for t in tasks if (iv := paired_interval(
                [end[k]["per_task"][t]["eval_accuracy"] - base_e[k]["per_task"][t]["eval_accuracy"]
                 for k in ek if t in end[k].get("per_task", {}) and t in base_e[k].get("per_task", {})]))},
            greedy_diff_by_question=by_question(end, base_e, ek),
            greedy_diff_by_seed={seed: iv for seed in sorted({k[0] for k in ek}) if (iv := paired_interval(
                [d for k, d in greedy.items() if k[0] == seed]))},
            score_diff=score_diff, score_ratio=score_ratio, correct_ratio=correct_ratio,
        ))
    return out


def _iv(iv: Interval | None, digits: int = 3) -> str:
    return "-" if iv is None else iv.text(digits)


def format_paired(rows: list[Paired], baseline: str = "alone") -> str:
    if not rows:
        return ""
    head = (f"\nPaired with {baseline} (same seed, same agent; mean difference [95 % interval over pairs]):\n\n"
            f"| configuration | pairs | total reward - {baseline} | ratio | same questions' reward - {baseline} "
            f"| held-out greedy: change since start "
            f"| greedy - {baseline} (middle) | greedy - {baseline} (end) | sampled - {baseline} (end) |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    lines = [f"| {p.config} | {p.pairs} | {_iv(p.total_diff, 2)} | {_f(p.total_ratio, 2)}x "
             f"| {_iv(p.same_questions_diff, 2)} | {_iv(p.greedy_change)} "
             f"| {_iv(p.middle_greedy_diff)} | {_iv(p.greedy_diff)} | {_iv(p.sampled_diff)} |" for p in rows]
    tasks = sorted({t for p in rows for t in p.per_task})
    text = head + "\n".join(lines) + "\n"
    scored = [p for p in rows if p.score_ratio is not None]
    if scored:
        text += (f"\nTotal reward without the format bonus (reasoning-gym's score alone, the reward the paper sums), "
                 f"and of fully correct answers, against {baseline}:\n\n"
                 # Three places: pre-written rules decide on this ratio (>= 1.50x), and two can round across the line.
                 + "".join(f"- {p.config}: {_f(p.score_ratio, 3)}x ({_iv(p.score_diff, 2)} per pair); fully correct "
                           f"{_f(p.correct_ratio, 3)}x\n" for p in scored))
    by_q = [p for p in rows if p.greedy_diff_by_question is not None]
    if by_q:
        text += (f"\nHeld-out greedy at the end minus {baseline}, the interval over held-out questions (every agent "
                 "answers the same ones; each question's difference is its mean over the pairs):\n\n"
                 + "".join(f"- {p.config}: {p.greedy_diff_by_question.text()} over "
                           f"{p.greedy_diff_by_question.n} questions\n" for p in by_q))
    by_seed = [p for p in rows if len(p.greedy_diff_by_seed) > 1]
    if by_seed:
        text += (f"\nHeld-out greedy at the end minus {baseline}, per seed (the interval over its agents):\n\n"
                 + "".join(f"- {p.config}: " + ", ".join(f"seed {seed} {iv.text()}"
                                                       for seed, iv in p.greedy_diff_by_seed.items()) + "\n"
                           for p in by_seed))
    if tasks:
        text += (f"\nHeld-out greedy at the end, per task, minus {baseline}:\n\n| configuration | "
                 + " | ".join(tasks) + " |\n|---|" + "---|" * len(tasks) + "\n")
        text += "\n".join(f"| {p.config} | " + " | ".join(_iv(p.per_task.get(t)) for t in tasks) + " |"
                           for p in rows) + "\n"
    return text


def group_mix(records: list[dict[str, Any]]) -> str:
    """What each configuration trained on: own groups with spread, external groups, how each was scored.

    From the rounds' ``group_summaries`` (engine.tasks.groups.group_summary); records made before them
    give only the counts. *Success* is the share of a group's completions its receiver scored fully correct;
    *frontier* the share of external groups on tasks where the receiver's own running accuracy was between
    0.2 and 0.8; *up : down* the completions above and below their group's mean reward, which the update
    pushes up and down.
    """
    configs = list(dict.fromkeys(r["config"] for r in records))
    lines = []
    for config in configs:
        rs = [r for r in records if r["config"] == config]
        own_spread = _mean([r.get("groups_trained", 0) - r.get("external_groups", 0) for r in _detailed(rs)])
        summaries = [g for r in rs for g in r.get("group_summaries", [])]
        own = [g for g in summaries if g["source"] == "own" and g["spread"]]
        ext = [g for g in summaries if g["source"] != "own"]

        def success(gs: list[dict[str, Any]]) -> str:
            n = sum(g["completions"] for g in gs)
            return f"{sum(g['correct'] for g in gs) / n:.2f}" if n else "-"

        def up_down(gs: list[dict[str, Any]]) -> str:
            return f"{sum(g['positives'] for g in gs)} : {sum(g['negatives'] for g in gs)}" if gs else "-"

        known = [g for g in ext if g.get("own_accuracy") is not None]
        frontier = (f"{sum(0.2 <= g['own_accuracy'] <= 0.8 for g in known) / len(known):.2f}" if known else "-")
        lines.append(f"| {config} | {len(rs)} | {own_spread:.2f} | {_mean([r.get('external_groups', 0) for r in rs]):.2f} "
                     f"| {success(own)} | {success(ext)} | {up_down(own)} | {up_down(ext)} | {frontier} |")
    head = ("\nWhat was trained (per agent-round; success: completions fully correct as the receiver scored them):\n\n"
            "| configuration | agent-rounds | own groups with spread | external groups | success, own trained "
            "| success, external | up : down, own | up : down, external | external on the receiver's frontier |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    text = head + "\n".join(lines) + "\n"
    tasks = sorted({g["task"] for r in records for g in r.get("group_summaries", []) if g["source"] != "own"})
    if tasks:
        text += "\nExternal groups trained per task (count, success):\n\n| configuration | " + " | ".join(tasks) \
            + " |\n|---|" + "---|" * len(tasks) + "\n"
        for config in configs:
            ext = [g for r in records if r["config"] == config for g in r.get("group_summaries", [])
                   if g["source"] != "own"]
            if not ext:
                continue
            cells = []
            for t in tasks:
                gs = [g for g in ext if g["task"] == t]
                n = sum(g["completions"] for g in gs)
                cells.append(f"{len(gs)}, {sum(g['correct'] for g in gs) / n:.2f}" if n else "0")
            text += f"| {config} | " + " | ".join(cells) + " |\n"
    return text


def phase_bounds(last_round: int, parts: int = 4) -> list[tuple[int, int]]:
    """Rounds 1..last_round cut into ``parts`` consecutive spans as equal as whole rounds allow."""
    parts = max(1, min(parts, last_round))
    cuts = [i * last_round // parts for i in range(parts + 1)]
    return [(cuts[i] + 1, cuts[i + 1]) for i in range(parts)]


def phases(records: list[dict[str, Any]], baseline: str = "alone", parts: int = 4) -> str:
    """When in a run sharing helped or hurt: the paired difference to the baseline per span of rounds, and
    what each configuration's rounds looked like in that span (own groups with spread, answers in format).

    A total over 40 rounds can hide an early gain cancelled by a late loss (run 5: sharing led while the model
    learned the answer format, then fell behind once its own groups had lost their spread).
    """
    configs = list(dict.fromkeys(r["config"] for r in records))
    if not records:
        return ""
    spans = phase_bounds(max(int(r["round"]) for r in records), parts)
    if len(spans) < 2:
        return ""
    head_cells = " | ".join(f"rounds {a}-{b}" for a, b in spans)
    rule = "|---|" + "---|" * len(spans)
    text = ""
    if baseline in configs and len(configs) > 1:
        text += (f"\nBy span of rounds: total reward minus {baseline} over the span, mean over (seed, agent) pairs "
                 f"[95 % interval]:\n\n| configuration | {head_cells} |\n{rule}\n")
        for config in configs:
            if config == baseline:
                continue
            both = _rounds(records, config) & _rounds(records, baseline)
            cells = []
            for a, b in spans:
                span = [r for r in records if (r["seed"], r["agent"], r["round"]) in both and a <= r["round"] <= b]
                tot, base = agent_totals(span, config), agent_totals(span, baseline)
                cells.append(_iv(paired_interval([tot[k] - base[k] for k in sorted(set(tot) & set(base))]), 2))
            text += f"| {config} | " + " | ".join(cells) + " |\n"
    def by_span(title: str, cell: Callable[[list[dict[str, Any]]], str]) -> str:
        """A table of ``cell`` over each configuration's records in each span ("-" where it has none)."""
        out = f"\nBy span of rounds: {title}:\n\n| configuration | {head_cells} |\n{rule}\n"
        for config in configs:
            cells = []
            for a, b in spans:
                rs = [r for r in records if r["config"] == config and a <= r["round"] <= b]
                cells.append(cell(rs) if rs else "-")
            out += f"| {config} | " + " | ".join(cells) + " |\n"
        return out

    def own_and_format(rs: list[dict[str, Any]]) -> str:
        full = _detailed(rs)
        own = _mean([r.get("groups_trained", 0) - r.get("external_groups", 0) for r in full]) if full else None
        fmt = [r["format_rate"] for r in rs if r.get("format_rate") is not None]
        return ("-" if own is None else f"{own:.2f}") + (f" / {_mean(fmt):.2f}" if fmt else " / -")

    def grad_norms(rs: list[dict[str, Any]]) -> str:
        norms = [r["grad_norm"] for r in rs if r.get("grad_norm") is not None]
        return f"{statistics.median(norms):.2f} ({max(norms):.2f})" if norms else "-"

    def ppo_clipped(rs: list[dict[str, Any]]) -> str:
        low = [r["clip_low_frac"] for r in rs if r.get("clip_low_frac") is not None]
        high = [r["clip_high_frac"] for r in rs if r.get("clip_high_frac") is not None]
        return f"{_mean(low):.3f} / {_mean(high):.3f}" if low and high else "-"

    text += by_span("own groups with spread per round / answers in format", own_and_format)
    if any("grad_norm" in r for r in records):  # how large the updates were, and whether the clip acted
        text += by_span("gradient norm before clipping, median (largest)", grad_norms)
    # The PPO clip only acts from a round's second update on (iterations > 1); with one it holds no token.
    if any(r.get("clip_low_frac") or r.get("clip_high_frac") for r in records):
        text += by_span("share of completion tokens held by the PPO clip, below / above, mean", ppo_clipped)
    return text


def cost(records: list[dict[str, Any]], evals: dict[tuple[str, int], dict[str, Any]]) -> str:
    """What the runs cost: agent-rounds and compute hours (rounds; held-out evaluations apart)."""
    full = _detailed(records)
    round_h = sum(r.get("round_s", 0.0) for r in full) / 3600
    eval_h = sum(e.get("eval_s", 0.0) for data in evals.values() for when in ("eval", "eval_middle")
                 for e in data.get(when, {}).values()) / 3600
    per = f", {round_h * 3600 / len(full):.1f} s per agent-round" if full else ""
    lost = len(records) - len(full)
    timed = f" ({lost} recovered from checkpoints, untimed: the hours are the other {len(full)}'s)" if lost else ""
    return (f"\ncost: {len(records)} agent-rounds{timed}, {round_h:.2f} h of rounds{per}; "
            f"{eval_h:.2f} h of held-out evaluation (start evaluations, shared by configurations, not counted)\n")


def curves(records: list[dict[str, Any]], window: int = 5) -> dict[str, tuple[list[int], list[float], list[float], list[float]]]:
    """Per configuration: rounds, and the mean, min and max over (seed, agent) of the trailing moving
    average of reward per round."""
    series: dict[str, dict[tuple[int, int], dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in records:
        series[r["config"]][(int(r["seed"]), r["agent"])][r["round"]] = r["reward_mean"]
    out = {}
    for config, by_agent in series.items():
        smoothed = []
        for points in by_agent.values():
            rounds = sorted(points)
            vals = [points[k] for k in rounds]
            smoothed.append({k: statistics.fmean(vals[max(0, i - window + 1):i + 1]) for i, k in enumerate(rounds)})
        rounds = sorted({k for s in smoothed for k in s})
        cols = [[s[k] for s in smoothed if k in s] for k in rounds]
        out[config] = (rounds, [statistics.fmean(c) for c in cols], [min(c) for c in cols], [max(c) for c in cols])
    return out


def catch_up(records: list[dict[str, Any]], baseline: str = "alone", window: int = 5) -> str:
    """How many rounds each configuration took to reach the baseline's reward at its last round.

    On a task at the model's frontier sharing is a speed-up (chain3: the swarm levels off while alone is
    still climbing at round 40), which a ratio of totals over a fixed number of rounds understates or
    overstates depending on where the run stops. Read off the plotted curves (the mean over agents of the
    trailing ``window``-round average): the target is the baseline's value at its last round, and the baseline's
    own first round at or above it is the yardstick (a noisy curve may touch it early).
    """
    series = curves(records, window)
    if baseline not in series or len(series) < 2:
        return ""
    rounds, means, _, _ = series[baseline]
    last, target = rounds[-1], means[-1]

    def first_at_target(config: str) -> int | None:
        rs, ms, _, _ = series[config]
        return next((r for r, m in zip(rs, ms) if r <= last and m >= target), None)

    own = first_at_target(baseline)
    head = (f"\nRounds to reach {baseline}'s reward at round {last} ({target:.3f} a round, {window}-round average "
            f"over agents): ")
    # Round 1 is the untrained model in every configuration (training follows its sampling). A target that some
    # configuration's round 1 already meets was no gain: Gemma alone in mixed-chain3 ended below its round 1,
    # and in mixed-chain3-confirm's seed 3 just above its own but below the swarm's ("8.0x as fast" at round 1).
    starts = {config: ms[0] for config, (_, ms, _, _) in series.items()}
    if target <= max(starts.values()):
        at = ", ".join(f"{config} {value:.3f}" for config, value in starts.items())
        return head + f"none to count, round {rounds[0]} was there already ({at})\n"
    lines = [head + f"{baseline} round {own}\n"]
    for config in series:
        if config == baseline:
            continue
        at = first_at_target(config)
        lines.append(f"- {config}: " + (f"not by round {last}" if at is None
                                        else f"round {at} ({own / at:.1f}x as fast)") + "\n")
    return "".join(lines)


def plot(records: list[dict[str, Any]], path: Path, window: int = 5) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for config, (rounds, mean, lo, hi) in curves(records, window).items():
        line, = ax.plot(rounds, mean, label=config)
        ax.fill_between(rounds, lo, hi, color=line.get_color(), alpha=0.15)
    ax.set_xlabel("round")
    ax.set_ylabel(f"reward, moving average over {window} rounds")
    ax.set_title("mean over agents and seeds; band: lowest to highest agent")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def only_model(records: list[dict[str, Any]], evals: dict[tuple[str, int], dict[str, Any]],
               model: str) -> tuple[list[dict[str, Any]], dict[tuple[str, int], dict[str, Any]]]:
    """The records and held-out results of the agents that ran ``model`` (a run with ``--models``)."""
    keep = [r for r in records if r.get("model") == model]
    agents = {(r["config"], int(r["seed"]), str(r["agent"])) for r in keep}
    out = {}
    for (c, seed), data in evals.items():
        out[(c, seed)] = {**data, **{when: {a: e for a, e in data.get(when, {}).items() if (c, seed, a) in agents}
                                     for when in ("eval", "eval_middle", "eval_start")}}
    return keep, out


def task_course(evals: dict[tuple[str, int], dict[str, Any]]) -> str:
    """Per configuration and task, held-out greedy at the start, the middle and the end (mean over seeds and agents,
    finished cells only): where a lead over the baseline appears and where it goes."""
    configs = list(dict.fromkeys(c for c, _ in evals))
    cols = (("eval_start", "start"), ("eval_middle", "middle"), ("eval", "end"))
    tasks = sorted({t for data in evals.values() for e in data.get("eval", {}).values() for t in e.get("per_task", {})})
    if not tasks:
        return ""
    lines = []
    for config in configs:
        cells = []
        for t in tasks:
            vals = [[e["per_task"][t]["eval_accuracy"] for e in agent_evals(evals, config, when).values()
                     if t in e.get("per_task", {})] for when, _ in cols]
            means = [statistics.fmean(v) if v else None for v in vals]
            cells.append(" / ".join("-" if m is None else f"{m:.3f}" for m in means))
        lines.append(f"| {config} | " + " | ".join(cells) + " |")
    return ("\nHeld-out greedy per task, start / middle / end (mean over seeds and agents):\n\n| configuration | "
            + " | ".join(tasks) + " |\n|---|" + "---|" * len(tasks) + "\n" + "\n".join(lines) + "\n")


def partial_note(evals: dict[tuple[str, int], dict[str, Any]]) -> str:
    """Which cells' held-out results are an unfinished cell's (``held_out_so_far``): their pairs are fewer."""
    lines = [f"- {c} seed {s}: end evaluations of {e['partial']['agents']} of {e['partial']['of']} agents"
             for (c, s), e in sorted(evals.items()) if "partial" in e]
    if not lines:
        return ""
    return ("\nHeld-out results of unfinished cells, as far as they went (pairs without an end evaluation are left "
            "out of the held-out columns):\n" + "\n".join(lines) + "\n")


def ran_with_note(records: list[dict[str, Any]]) -> str:
    """The cells that ran with other speed settings than their configuration's first cell (``SPEED``)."""
    cells = sorted({(r["config"], int(r["seed"]), r["ran_with"]) for r in records if r.get("ran_with")})
    if not cells:
        return ""
    return ("\nCells counted in their configuration that ran with other speed settings (not the method's):\n"
            + "\n".join(f"- {c} seed {s}: {w}" for c, s, w in cells) + "\n")


def starved_note(records: list[dict[str, Any]]) -> str:
    """Sharing cells' agent-rounds after the first that were offered no peers' group (``external_candidates``
    0): the relay link down or the pool's groups past the age a node asks for (600 s), e.g. while a run was
    stopped. Such rounds trained alone; a cell with many of them measures less sharing than it names."""
    starved: dict[tuple[str, int], list[int]] = {}
    total: dict[tuple[str, int], int] = {}
    for r in records:
        if int(r["round"]) > 1:
            cell = (r["config"], int(r["seed"]))
            total[cell] = total.get(cell, 0) + 1
            if r.get("external_candidates") == 0:
                starved.setdefault(cell, []).append(int(r["round"]))
    if not starved:
        return ""
    lines = []
    for (c, s), rounds in sorted(starved.items()):
        lines.append(f"- {c} seed {s}: {len(rounds)} of {total[(c, s)]} agent-rounds "
                     f"(rounds {', '.join(map(str, sorted(set(rounds))))})")
    return ("\nAgent-rounds after round 1 offered no peers' group (relay link down, or the pool's groups older than a "
            "node asks for: they trained alone):\n" + "\n".join(lines) + "\n")


def only_seeds(records: list[dict[str, Any]], evals: dict[tuple[str, int], dict[str, Any]], seeds: set[int]
               ) -> tuple[list[dict[str, Any]], dict[tuple[str, int], dict[str, Any]]]:
    """The records and evaluations of these seeds only (a report on a part of a run)."""
    kept = [r for r in records if int(r["seed"]) in seeds]
    if not kept:
        have = ", ".join(str(s) for s in sorted({int(r["seed"]) for r in records}))
        raise SapoError(f"no records of seed {', '.join(map(str, sorted(seeds)))} (the runs have seeds {have})")
    return kept, {k: v for k, v in evals.items() if k[1] in seeds}


def report(dirs: list[Path], plot_path: Path | None = None, window: int = 5, seeds: set[int] | None = None,
           against: str | None = None) -> str:
    """The whole report. ``seeds``: only these; ``against``: also pair every configuration with this one (e.g.
    a variant with the node's default), beside the pairing with alone."""
    records, evals = load_runs(dirs)
    if seeds:
        records, evals = only_seeds(records, evals, seeds)
    if against is not None and against not in {r["config"] for r in records}:
        have = ", ".join(dict.fromkeys(r["config"] for r in records))
        raise SapoError(f"no configuration {against!r} to pair with (the runs have {have})")
    text = (format_table(table(records, evals)) + partial_note(evals) + ran_with_note(records) + starved_note(records)
            + format_paired(paired(records, evals)))
    if against is not None and against != "alone":
        text += format_paired(paired(records, evals, against), against) + phases(records, against)
    text += (task_course(evals) + phases(records) + catch_up(records, window=window) + group_mix(records)
             + cost(records, evals))
    models = sorted({r["model"] for r in records if r.get("model")})
    if len(models) > 1:  # a mixed swarm: each model's agents against their own alone, and their course
        for m in models:
            m_records, m_evals = only_model(records, evals, m)
            text += (f"\n### agents running {m}\n" + format_paired(paired(m_records, m_evals)) + task_course(m_evals)
                     + catch_up(m_records, window=window))
    # The default plot lands in the run's own folder, where a committed run keeps the plot of all its seeds:
    # a reading of part of it (some seeds) or beside other runs names its file, or it would replace that one.
    out = plot_path or (dirs[0] / "reward.png" if len(dirs) == 1 and not seeds else None)
    if out is None:
        return text + "\n(no plot: a reading of several runs or of some seeds writes one only with --plot FILE)\n"
    try:
        plot(records, out, window)
        text += f"\nplot: {out}\n"
    except ImportError:
        text += "\n(no plot: matplotlib is not installed; pip install matplotlib)\n"
    except OSError as exc:
        raise SapoError(f"cannot write the plot to {out}: {exc.strerror or exc}") from None
    return text
