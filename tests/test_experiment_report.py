"""The experiment report from hand-made records: totals, ratios, spread over seeds, held-out, compute."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import statistics
from pathlib import Path

import pytest

from engine.errors import SapoError
from engine.lab.report import (by_question, catch_up, curves, format_paired, format_table, group_mix, load_runs, only_model, only_seeds, paired, paired_interval,
                               phase_bounds, phases, task_course,
                               report, t975, table)


def _cell(root: Path, config: str, seed: int, rewards: dict[int, list[float]], *, done: bool = True,
          trained: int = 2, external: int = 0, round_s: float = 360.0, evals: tuple[float, float] = (0.5, 0.4)) -> None:
    """rewards: agent -> reward per round (rounds 1..n)."""
    cell = root / config.replace("+", "_") / f"seed-{seed}"
    cell.mkdir(parents=True)
    lines = []
    for agent, rs in rewards.items():
        for i, r in enumerate(rs, start=1):
            lines.append({"type": "round", "config": config, "seed": seed, "agent": agent, "round": i,
                          "reward_mean": r, "groups_trained": trained, "external_groups": external, "round_s": round_s})
    (cell / "records.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"torn": ')
    if done:
        (cell / "done.json").write_text(json.dumps({"config": config, "seed": seed, "rounds": 2, "eval": {
            str(a): {"eval_accuracy": evals[0], "eval_sampled_accuracy": evals[1]} for a in rewards}}))


@pytest.fixture
def run(tmp_path: Path) -> Path:
    # alone: seed 0 total 0.1+0.3+0.2+0.2 = 0.8; seed 1 total 1.2
    _cell(tmp_path, "alone", 0, {0: [0.1, 0.3], 1: [0.2, 0.2]})
    _cell(tmp_path, "alone", 1, {0: [0.3, 0.3], 1: [0.3, 0.3]}, evals=(0.3, 0.2))
    # swarm: seed 0 total 1.6 (2.0x), seed 1 total 1.8 (1.5x); mean 1.7 over alone's 1.0 = 1.7x
    _cell(tmp_path, "swarm", 0, {0: [0.4, 0.4], 1: [0.4, 0.4]}, trained=4, external=2, round_s=720.0)
    _cell(tmp_path, "swarm", 1, {0: [0.5, 0.4], 1: [0.5, 0.4]}, trained=4, external=2, round_s=720.0, done=False)
    return tmp_path


def test_table_from_hand_made_records(run: Path):
    records, evals = load_runs([run])
    assert len(records) == 16  # the torn last lines are left out
    alone, swarm = table(records, evals)
    assert alone.config == "alone" and (alone.seeds, alone.agents, alone.rounds) == (2, 2, 2)
    assert alone.total == pytest.approx(1.0) and (alone.total_min, alone.total_max) == pytest.approx((0.8, 1.2))
    assert alone.ratio == pytest.approx(1.0)
    assert swarm.total == pytest.approx(1.7)
    assert swarm.ratio == pytest.approx(1.7)
    assert (swarm.ratio_min, swarm.ratio_max) == pytest.approx((1.5, 2.0))
    assert swarm.trained_per_round == 4 and swarm.external_per_round == 2
    assert alone.reward_per_round == pytest.approx(2.0 / 8)
    # 8 agent-rounds of 360 s = 0.8 h for a reward of 2.0
    assert alone.reward_per_hour == pytest.approx(2.0 / 0.8)
    assert swarm.reward_per_hour == pytest.approx(3.4 / 1.6)
    assert alone.eval_greedy == pytest.approx(0.4) and alone.eval_sampled == pytest.approx(0.3)
    assert swarm.eval_greedy == pytest.approx(0.5)  # seed 1 has not finished: only seed 0's agents
    assert alone.complete and not swarm.complete
    text = format_table([alone, swarm])
    assert "| swarm (incomplete) | 2 x 2 x 2 | 1.70 (1.60-1.80) | 1.70x (1.50-2.00) |" in text


def test_curves_moving_average_and_band(run: Path):
    records, _ = load_runs([run / "alone"])
    rounds, mean, lo, hi = curves(records, window=2)["alone"]
    assert rounds == [1, 2]
    # round 1: 0.1, 0.2, 0.3, 0.3; round 2 (window 2): 0.2, 0.2, 0.3, 0.3
    assert mean == pytest.approx([0.225, 0.25]) and lo == pytest.approx([0.1, 0.2]) and hi == pytest.approx([0.3, 0.3])


def test_report_writes_plot(run: Path, tmp_path: Path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "fig.png"
    text = report([run], out)
    assert "| alone |" in text and out.stat().st_size > 1000


def test_the_default_plot_is_written_only_for_one_whole_run(run: Path, tmp_path_factory):
    """A committed run's reward.png shows all its seeds: a reading of some of them, or of it beside another run,
    must not replace it unless told where to write."""
    pytest.importorskip("matplotlib")
    kept = run / "reward.png"
    assert "plot: " in report([run]) and kept.stat().st_size > 1000
    before = kept.read_bytes()
    other = tmp_path_factory.mktemp("other")
    _cell(other, "alone", 2, {0: [0.9, 0.9], 1: [0.9, 0.9]})
    for text in (report([run], seeds={0}), report([run, other])):
        assert "(no plot: a reading of several runs or of some seeds writes one only with --plot FILE)" in text
        assert kept.read_bytes() == before
    assert not (other / "reward.png").exists()
    named = other / "mine.png"
    assert f"plot: {named}" in report([run, other], named, seeds={0}) and named.stat().st_size > 1000


def test_a_lost_runs_superseded_records_are_not_read(run: Path):
    """A cell rerun on another machine keeps the lost run's rounds in superseded/: they are not this run's."""
    lost = run / "alone" / "seed-0" / "superseded"
    lost.mkdir()
    shutil.copy(run / "alone" / "seed-0" / "records.jsonl", lost / "records.jsonl")
    records, _ = load_runs([run])
    assert len(records) == 16


def _meta(root: Path, config: str, seed: int, **settings) -> None:
    cell = root / config.replace("+", "_") / f"seed-{seed}"
    (cell / "meta.json").write_text(json.dumps({"config": config, "seed": seed, "models": ["m"], "settings": {
        "seed": seed, "heldout_draw": seed + 1, "learning_rate": 1e-4} | settings}))


def test_two_runs_with_one_setting_changed_are_paired_under_their_difference(tmp_path: Path):
    """A second --out with another learning rate: its cells are named by what differs, and pair with the first's."""
    first, second = tmp_path / "r6", tmp_path / "r7"
    for seed in (0, 1):
        _cell(first, "alone", seed, {0: [0.1, 0.1], 1: [0.2, 0.2]})
        _meta(first, "alone", seed)  # heldout_draw differs by seed: not a difference of design
    _cell(second, "alone", 1, {0: [0.3, 0.3], 1: [0.2, 0.4]})
    _meta(second, "alone", 1, learning_rate=2e-4)
    records, evals = load_runs([first, second])
    assert {r["config"] for r in records} == {"alone", "alone [learning_rate 0.0002]"}
    assert ("alone [learning_rate 0.0002]", 1) in evals and ("alone", 1) in evals
    (p,) = paired(records, evals)
    assert p.config == "alone [learning_rate 0.0002]" and p.pairs == 2
    assert p.total_diff is not None and p.total_diff.mean == pytest.approx(0.3)  # seed 1: 0.6 - 0.2, 0.6 - 0.4
    # A directory and a cell inside it overlap: each cell is read once.
    again, _ = load_runs([first, first / "alone"])
    assert len(again) == 8


def test_held_out_results_pair_at_the_same_round_when_runs_differ_in_length(tmp_path: Path):
    """A 2-round run beside a 4-round baseline (chain3-it2's 30 rounds beside chain3-long's 60): its end is paired with
    the baseline's middle (the same round), its middle with nothing the baseline took; rewards over rounds 1-2."""
    def done(cell: str, rounds: int, middle: dict, end: dict) -> None:
        path = tmp_path / cell / "seed-0" / "done.json"
        data = json.loads(path.read_text())
        data.update(rounds=rounds, eval_middle={str(a): {**_evals(g, {}), "round": rounds // 2} for a, g in middle.items()},
                    eval={str(a): {**_evals(g, {}), "round": rounds} for a, g in end.items()})
        path.write_text(json.dumps(data))

    _cell(tmp_path, "alone", 0, {0: [0.1] * 4, 1: [0.2] * 4})
    done("alone", 4, middle={0: 0.30, 1: 0.40}, end={0: 0.60, 1: 0.70})
    _cell(tmp_path, "swarm", 0, {0: [0.3] * 2, 1: [0.3] * 2})
    done("swarm", 2, middle={0: 0.20, 1: 0.20}, end={0: 0.50, 1: 0.40})
    (p,) = paired(*load_runs([tmp_path]))
    assert p.total_ratio == pytest.approx(1.2 / 0.6)  # rounds 1-2 only
    assert p.greedy_diff is not None and p.greedy_diff.mean == pytest.approx(0.1) and p.greedy_diff.n == 2  # +0.2, 0.0
    assert p.middle_greedy_diff is None  # the baseline took nothing after round 1
    assert p.greedy_diff_by_question is None and p.sampled_diff is not None and p.sampled_diff.mean == pytest.approx(0.05)
    # Results from before the round was kept pair as they always did, end with end.
    for cell in ("alone", "swarm"):
        path = tmp_path / cell / "seed-0" / "done.json"
        data = json.loads(path.read_text())
        for when in ("eval", "eval_middle"):
            for e in data[when].values():
                del e["round"]
        path.write_text(json.dumps(data))
    (old,) = paired(*load_runs([tmp_path]))
    assert old.greedy_diff is not None and old.greedy_diff.mean == pytest.approx(-0.2)  # 0.5 - 0.6, 0.4 - 0.7
    assert old.middle_greedy_diff is not None and old.middle_greedy_diff.mean == pytest.approx(-0.15)


def test_a_cell_that_differs_only_in_speed_settings_stays_in_its_configuration(tmp_path: Path):
    """Seed 2 run with --train-dtype fp32 --threads 2 to match its seed's machine: the same design, named as such."""
    for seed in (0, 1):
        _cell(tmp_path, "swarm", seed, {0: [0.1, 0.1]})
        _meta(tmp_path, "swarm", seed, threads=1, train_dtype="auto", priority="low")
        _cell(tmp_path, "alone", seed, {0: [0.1, 0.1]})
    _cell(tmp_path, "swarm", 2, {0: [0.2, 0.2]})
    _meta(tmp_path, "swarm", 2, threads=2, train_dtype="fp32", learning_rate=2e-4)  # the rate is the method's
    _cell(tmp_path, "alone", 2, {0: [0.1, 0.1]})
    records, evals = load_runs([tmp_path])
    assert {r["config"] for r in records} == {"alone", "swarm", "swarm [learning_rate 0.0002]"}
    _meta(tmp_path, "swarm", 2, threads=2, train_dtype="fp32", priority="normal")
    records, evals = load_runs([tmp_path])
    assert {r["config"] for r in records} == {"alone", "swarm"}
    swarm = next(row for row in table(records, evals) if row.config == "swarm")
    assert swarm.seeds == 3
    text = report([tmp_path], tmp_path / "fig.png")
    assert "- swarm seed 2: threads 2, train_dtype fp32, priority normal" in text


def test_the_same_cell_twice_is_an_error(tmp_path: Path):
    for root in (tmp_path / "a", tmp_path / "b"):
        _cell(root, "alone", 0, {0: [0.1, 0.1]})
        _meta(root, "alone", 0)
    with pytest.raises(SapoError, match="alone seed 0 is both in .* with the same settings"):
        load_runs([tmp_path / "a", tmp_path / "b"])


def test_no_records_is_a_clear_error(tmp_path: Path):
    with pytest.raises(SapoError, match="no experiment records"):
        load_runs([tmp_path])


def test_records_without_a_round_or_with_a_broken_one_are_a_clear_error(tmp_path: Path):
    cell = tmp_path / "alone" / "seed-0"
    cell.mkdir(parents=True)
    (cell / "records.jsonl").write_text('{"torn\n[1, 2]\n"a string"\n')  # JSON, but no record (was an IndexError)
    with pytest.raises(SapoError, match="no experiment records"):
        report([tmp_path])
    with open(cell / "records.jsonl", "a") as fh:
        fh.write(json.dumps({"type": "round", "config": "alone", "seed": 0}) + "\n")
    with pytest.raises(SapoError, match="records.jsonl: a round record without agent, round, reward_mean"):
        report([tmp_path])


def test_a_plot_that_cannot_be_written_is_a_clear_error(run: Path):
    blocker = run / "a-file"
    blocker.write_text("")
    with pytest.raises(SapoError, match="cannot write the plot to .*a-file/reward.png: Not a directory"):
        report([run], plot_path=blocker / "reward.png")


def test_paired_interval_by_hand():
    # differences 1, 2, 3: mean 2, sd 1, se 1/sqrt(3), t(2) = 4.303
    iv = paired_interval([1.0, 2.0, 3.0])
    assert iv is not None and iv.n == 3 and iv.mean == pytest.approx(2.0)
    assert (iv.lo, iv.hi) == pytest.approx((2 - 4.303 / 3 ** 0.5, 2 + 4.303 / 3 ** 0.5))
    assert paired_interval([]) is None
    one = paired_interval([0.5])
    assert one is not None and (one.lo, one.hi, one.n) == (0.5, 0.5, 1)
    assert t975(1) == 12.706 and t975(11) == 2.228 and t975(35) == 2.042 and t975(500) == 1.960
    with pytest.raises(ValueError):
        t975(0)


def _evals(greedy: float, per_task: dict[str, float]) -> dict:
    return {"eval_accuracy": greedy, "eval_sampled_accuracy": greedy / 2,
            "per_task": {t: {"eval_accuracy": v} for t, v in per_task.items()}}


def test_paired_against_alone_per_agent_and_per_task(tmp_path: Path):
    # Two seeds x two agents. Per pair (seed, agent), swarm's total reward minus alone's: +0.2, +0.4, +0.0, +0.2.
    rewards = {("alone", 0): {0: [0.1, 0.1], 1: [0.2, 0.2]}, ("alone", 1): {0: [0.3, 0.3], 1: [0.1, 0.1]},
               ("swarm", 0): {0: [0.2, 0.2], 1: [0.4, 0.4]}, ("swarm", 1): {0: [0.3, 0.3], 1: [0.2, 0.2]}}
    for (config, seed), rs in rewards.items():
        _cell(tmp_path, config, seed, rs)
        done = tmp_path / config / f"seed-{seed}" / "done.json"
        data = json.loads(done.read_text())
        up = 0.1 if config == "swarm" else 0.0  # swarm ends 0.1 higher on task a, level on task b
        data["eval"] = {str(a): _evals(0.5 + up / 2, {"a": 0.5 + up, "b": 0.5}) for a in rs}
        data["eval_start"] = {str(a): _evals(0.4, {"a": 0.4, "b": 0.4}) for a in rs}
        data["eval_middle"] = {str(a): _evals(0.45 + (a * 0.1 if config == "swarm" else 0.0), {}) for a in rs}
        done.write_text(json.dumps(data))
    records, evals = load_runs([tmp_path])
    (p,) = paired(records, evals)
    assert p.config == "swarm" and p.pairs == 4
    assert p.total_diff is not None and p.total_diff.mean == pytest.approx(0.2) and p.total_diff.n == 4
    sd = statistics.stdev([0.2, 0.4, 0.0, 0.2])
    assert p.total_diff.hi - p.total_diff.mean == pytest.approx(3.182 * sd / 2)
    assert p.total_ratio == pytest.approx(2.2 / 1.4)  # alone 0.2 + 0.4 + 0.6 + 0.2, swarm 0.4 + 0.8 + 0.6 + 0.4
    assert p.greedy_diff is not None and p.greedy_diff.mean == pytest.approx(0.05) and p.greedy_diff.lo == pytest.approx(0.05)
    assert p.greedy_change is not None and p.greedy_change.mean == pytest.approx(0.15)
    assert p.middle_greedy_diff is not None and p.middle_greedy_diff.mean == pytest.approx(0.05)
    assert p.per_task["a"].mean == pytest.approx(0.1) and p.per_task["b"].mean == pytest.approx(0.0)
    text = format_paired([p])
    assert "| swarm | 4 | +0.20 [" in text and "| configuration | a | b |" in text
    assert "cost: 16 agent-rounds, 1.60 h of rounds, 360.0 s per agent-round" in report([tmp_path], tmp_path / "f.png")


def test_held_out_differences_are_also_given_per_seed(tmp_path: Path):
    # Seed 0: swarm ends +0.1 and +0.3 above alone (mean +0.2); seed 1: -0.1 and +0.1 (mean 0). Over the four
    # pairs +0.1; per seed, each seed's interval over its own two agents.
    ends = {0: {0: 0.1, 1: 0.3}, 1: {0: -0.1, 1: 0.1}}
    for config in ("alone", "swarm"):
        for seed, ups in ends.items():
            _cell(tmp_path, config, seed, {0: [0.2, 0.2], 1: [0.2, 0.2]})
            done = tmp_path / config / f"seed-{seed}" / "done.json"
            data = json.loads(done.read_text())
            data["eval"] = {str(a): _evals(0.5 + (up if config == "swarm" else 0.0), {}) for a, up in ups.items()}
            done.write_text(json.dumps(data))
    records, evals = load_runs([tmp_path])
    (p,) = paired(records, evals)
    assert p.greedy_diff is not None and p.greedy_diff.mean == pytest.approx(0.1) and p.greedy_diff.n == 4
    assert sorted(p.greedy_diff_by_seed) == [0, 1]
    s0, s1 = p.greedy_diff_by_seed[0], p.greedy_diff_by_seed[1]
    assert s0.mean == pytest.approx(0.2) and s0.n == 2 and s0.hi - s0.mean == pytest.approx(12.706 * statistics.stdev([0.1, 0.3]) / math.sqrt(2))
    assert s1.mean == pytest.approx(0.0) and s1.n == 2
    text = format_paired([p])
    assert f"- swarm: seed 0 {s0.text()}, seed 1 {s1.text()}" in text
    # One seed: the line would repeat the pairs' interval, so it is left out.
    (one,) = paired(*only_seeds(records, evals, {0}))
    assert "per seed" not in format_paired([one])


def test_a_mixed_run_is_paired_per_model(tmp_path: Path):
    # Agents 0 (model a) and 1 (model b); swarm helps b only: +0.4 total for agent 1, +0.0 for agent 0.
    for config, rs in {"alone": {0: [0.2, 0.2], 1: [0.1, 0.1]}, "swarm": {0: [0.2, 0.2], 1: [0.3, 0.3]}}.items():
        _cell(tmp_path, config, 0, rs)
        path = tmp_path / config / "seed-0" / "records.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines()[:-1]]
        path.write_text("".join(json.dumps({**r, "model": "ab"[r["agent"]]}) + "\n" for r in rows))
        done = tmp_path / config / "seed-0" / "done.json"
        data = json.loads(done.read_text())
        # Held-out on task t at the end: model a 0.5 in both; model b 0.2 alone, 0.6 in the swarm.
        end = {0: 0.5, 1: 0.6 if config == "swarm" else 0.2}
        data["eval"] = {str(a): {**_evals(end[a], {"t": end[a]}), "model": "ab"[a]} for a in rs}
        done.write_text(json.dumps(data))
    records, evals = load_runs([tmp_path])
    (b,) = paired(*only_model(records, evals, "b"))
    assert b.pairs == 1 and b.total_diff is not None and b.total_diff.mean == pytest.approx(0.4)
    (a,) = paired(*only_model(records, evals, "a"))
    assert a.total_diff is not None and a.total_diff.mean == pytest.approx(0.0)
    text = report([tmp_path], tmp_path / "f.png")
    assert "### agents running a" in text and "### agents running b" in text
    # Each model's section has its own held-out course per task (no start or middle evaluations here).
    b_part = text.split("### agents running b")[1]
    assert "| alone | - / - / 0.200 |" in b_part and "| swarm | - / - / 0.600 |" in b_part
    a_part = text.split("### agents running a")[1].split("### agents running b")[0]
    assert "| alone | - / - / 0.500 |" in a_part and "| swarm | - / - / 0.500 |" in a_part


def test_same_questions_reward_is_paired_on_the_main_streams_questions_only():
    # Alone's mean reward counts its extra draws too; the same-questions column compares only the main stream's
    # groups, which both configurations drew alike. Agent 1 of swarm has a round without the figure (older code):
    # that agent is left out of the column, not counted as 0.
    def rec(config, agent, rnd, reward, same):
        return {"type": "round", "config": config, "seed": 0, "agent": agent, "round": rnd,
                "reward_mean": reward, "paired_reward_mean": same}
    records = [rec("alone", 0, 1, 0.5, 0.2), rec("alone", 0, 2, 0.5, 0.3),
               rec("swarm", 0, 1, 0.2, 0.25), rec("swarm", 0, 2, 0.2, 0.45),
               rec("alone", 1, 1, 0.5, 0.1), rec("swarm", 1, 1, 0.2, None)]
    (p,) = paired(records, {})
    assert p.total_diff is not None and p.total_diff.mean == pytest.approx(-0.45)  # (-0.6 + -0.3) / 2
    assert p.same_questions_diff is not None and p.same_questions_diff.n == 1
    assert p.same_questions_diff.mean == pytest.approx(0.2)  # (0.25 + 0.45) - (0.2 + 0.3)
    assert "| swarm | 2 | -0.45 [" in format_paired([p]) and "| +0.20 (n=1) |" in format_paired([p])


def test_reward_without_the_format_bonus_is_paired_too():
    # Both configurations earn the 0.1 format bonus every round; swarm's task score is twice alone's. The
    # reward ratio reads (0.1 + 0.4) / (0.1 + 0.2) = 1.67x, the score ratio 2.0x. Agent 1's second round was
    # recovered from a checkpoint (no task score): that agent is left out of the score ratio, not counted as 0.
    def rec(config, agent, rnd, score, correct):
        r = {"type": "round", "config": config, "seed": 0, "agent": agent, "round": rnd,
             "reward_mean": 0.1 + score, "task_score": score, "accuracy": correct}
        if agent == 1 and rnd == 2 and config == "swarm":
            del r["task_score"]
        return r
    records = [rec(c, a, n, 0.2 * k, 0.1 * k * k) for c, k in (("alone", 1), ("swarm", 2))
               for a in (0, 1) for n in (1, 2)]
    (p,) = paired(records, {})
    assert p.total_ratio == pytest.approx(0.5 / 0.3)
    assert p.score_ratio == pytest.approx(2.0) and p.score_diff is not None and p.score_diff.n == 1
    assert p.score_diff.mean == pytest.approx(0.4)  # (0.4 + 0.4) - (0.2 + 0.2), agent 0 only
    assert p.correct_ratio == pytest.approx(4.0)
    assert "- swarm: 2.000x (+0.40 (n=1) per pair); fully correct 4.000x" in format_paired([p])
    # chain3-confirm's ratio of sums, 1.4977: two places would print 1.50x, the line its rule asked for.
    assert "- swarm: 1.498x" in format_paired([dataclasses.replace(p, score_ratio=406.22 / 271.23)])
    # Records without the figures (older code): no line, no error.
    bare = [{k: v for k, v in r.items() if k not in ("task_score", "accuracy")} for r in records]
    (q,) = paired(bare, {})
    assert q.score_ratio is None and "without the format bonus" not in format_paired([q])


def test_unfinished_cells_are_paired_over_the_rounds_both_finished():
    # Alone's agent 0 is a round ahead of swarm's: its round 3 is left out of the pair, not counted against swarm.
    records = [{"type": "round", "config": c, "seed": 0, "agent": 0, "round": n, "reward_mean": v}
               for c, rs in {"alone": [0.2, 0.2, 0.9], "swarm": [0.3, 0.3]}.items() for n, v in enumerate(rs, 1)]
    (p,) = paired(records, {})
    assert p.total_diff is not None and p.total_diff.mean == pytest.approx(0.2) and p.total_ratio == pytest.approx(1.5)


def test_group_mix_reads_what_each_round_trained():
    g = lambda src, correct, up, down, spread=True, acc=None: {  # noqa: E731
        "task": "gcd", "source": src, "completions": 4, "correct": correct, "positives": up, "negatives": down,
        "spread": spread, **({"own_accuracy": acc} if acc is not None else {})}
    records = [
        {"config": "alone", "seed": 0, "agent": 0, "round": 1, "reward_mean": 0.5, "groups_trained": 1,
         "external_groups": 0, "group_summaries": [g("own", 1, 1, 3), g("own", 0, 0, 0, spread=False)]},
        {"config": "swarm", "seed": 0, "agent": 0, "round": 1, "reward_mean": 0.5, "groups_trained": 2,
         "external_groups": 1, "group_summaries": [g("own", 3, 3, 1), g("abc", 2, 2, 2, acc=0.5)]},
        {"config": "swarm", "seed": 0, "agent": 1, "round": 1, "reward_mean": 0.5, "groups_trained": 1,
         "external_groups": 1, "group_summaries": [g("own", 0, 0, 0, spread=False), g("abd", 4, 4, 0, acc=0.9)]},
    ]
    text = group_mix(records)
    # alone: 1 own group with spread, success 1/4; swarm: own with spread 0.5 a round (3/4 correct),
    # external 1 a round, 6 of 8 correct, one of two on the receiver's frontier
    assert "| alone | 1 | 1.00 | 0.00 | 0.25 | - | 1 : 3 | - | - |" in text
    assert "| swarm | 2 | 0.50 | 1.00 | 0.75 | 0.75 | 3 : 1 | 6 : 2 | 0.50 |" in text
    assert "| swarm | 2, 0.75 |" in text  # per task: 2 external gcd groups


def test_phase_bounds_cover_every_round_once():
    assert phase_bounds(40) == [(1, 10), (11, 20), (21, 30), (31, 40)]
    assert phase_bounds(10, 4) == [(1, 2), (3, 5), (6, 7), (8, 10)]
    assert phase_bounds(3, 4) == [(1, 1), (2, 2), (3, 3)]
    for n in range(1, 30):
        spans = phase_bounds(n)
        assert [r for a, b in spans for r in range(a, b + 1)] == list(range(1, n + 1))


def test_catch_up_counts_rounds_to_the_baselines_final_reward():
    # Two agents, 4 rounds. Mean over agents: alone 0.2, 0.3, 0.4, 0.5; swarm 0.3, 0.5, 0.5, 0.5 (at alone's
    # final 0.5 from round 2); stuck 0.1 every round. With a 2-round average alone ends at 0.45 (reached at
    # round 4) and swarm reaches it at round 3.
    rewards = {"alone": [[0.1, 0.2, 0.3, 0.4], [0.3, 0.4, 0.5, 0.6]],
               "swarm": [[0.2, 0.4, 0.4, 0.4], [0.4, 0.6, 0.6, 0.6]],
               "stuck": [[0.1] * 4, [0.1] * 4]}
    records = [{"type": "round", "config": c, "seed": 0, "agent": a, "round": n + 1, "reward_mean": x}
               for c, by_agent in rewards.items() for a, xs in enumerate(by_agent) for n, x in enumerate(xs)]
    text = catch_up(records, window=1)
    assert "reward at round 4 (0.500 a round, 1-round average over agents): alone round 4" in text
    assert "- swarm: round 2 (2.0x as fast)" in text
    assert "- stuck: not by round 4" in text
    assert "- swarm: round 3 (1.3x as fast)" in catch_up(records, window=2)
    # A configuration run longer than its baseline is read only up to the baseline's last round.
    longer = records + [{**records[-1], "config": "stuck", "round": 5, "reward_mean": 0.9}]
    assert "- stuck: not by round 4" in catch_up(longer, window=1)
    assert catch_up([r for r in records if r["config"] != "alone"]) == ""  # nothing to catch up with
    # A baseline that ends no higher than it started gives no rounds to count (Gemma alone in mixed-chain3).
    falling = [{**r, "reward_mean": 0.5 - 0.1 * r["round"]} if r["config"] == "alone" else r for r in records]
    assert catch_up(falling, window=1).endswith(
        "none to count, round 1 was there already (alone 0.400, swarm 0.300, stuck 0.100)\n")
    # Nor one that gained less than the spread of round 1, the untrained model in every configuration: alone
    # 0.2 -> 0.25, swarm's round 1 already 0.3 (would read "round 1 (4.0x as fast)").
    slight = [{**r, "reward_mean": [0.2, 0.2, 0.2, 0.25][r["round"] - 1]} if r["config"] == "alone" else r
              for r in records]
    assert "none to count, round 1 was there already (alone 0.200, swarm 0.300, stuck 0.100)" in catch_up(slight, window=1)


def test_phases_show_an_early_gain_that_a_late_loss_cancels():
    # Two agents, 4 rounds: swarm leads by 0.2 a round in rounds 1-2; in rounds 3-4 it trails by 0.2 (agent 0)
    # and 0.1 (agent 1) a round, so its total is about alone's while the spans show both; its own groups lose
    # their spread late.
    def rec(config, agent, rnd, reward, trained, external, fmt):
        return {"type": "round", "config": config, "seed": 0, "agent": agent, "round": rnd, "reward_mean": reward,
                "groups_trained": trained, "external_groups": external, "format_rate": fmt}
    records = []
    for agent in (0, 1):
        for rnd in (1, 2, 3, 4):
            records.append(rec("alone", agent, rnd, 0.5, 3, 0, 0.9))
            late = rnd > 2
            records.append(rec("swarm", agent, rnd, 0.3 + 0.1 * agent if late else 0.7, 2 if late else 3, 2,
                               0.5 if late else 1.0))
    (p,) = paired(records, {})
    assert p.total_diff is not None and p.total_diff.mean == pytest.approx(0.1)  # agents: 0.0 and +0.2
    text = phases(records, parts=2)
    assert "| configuration | rounds 1-2 | rounds 3-4 |" in text
    assert "| swarm | +0.40 [+0.40, +0.40] | -0.30 [" in text  # rounds 3-4: agents -0.4 and -0.2
    assert "| alone | 3.00 / 0.90 | 3.00 / 0.90 |" in text
    assert "| swarm | 1.00 / 1.00 | 0.00 / 0.50 |" in text
    assert phases([r for r in records if r["round"] == 1]) == ""  # one round: no spans to compare
    assert "| alone |" in phases([r for r in records if r["config"] == "alone"])  # no baseline pairs: spans only
    unfinished = [r for r in records if r["config"] == "alone" or r["round"] <= 2]
    assert "| swarm | 1.00 / 1.00 | - |" in phases(unfinished, parts=2)  # a span it has not reached
    assert "gradient norm" not in text  # records from before grad_norm was kept
    for r in records:
        r["grad_norm"] = r["round"] * (0.5 if r["config"] == "alone" else 1.0)
    text = phases(records, parts=2)
    assert "| alone | 0.75 (1.00) | 1.75 (2.00) |" in text and "| swarm | 1.50 (2.00) | 3.50 (4.00) |" in text
    assert "PPO clip" not in text  # one update a round: the clip held nothing
    for r in records:
        r["clip_low_frac"], r["clip_high_frac"] = 0.0, 0.0
    assert "PPO clip" not in phases(records, parts=2)
    for r in records:  # a second update a round: the clip holds some tokens, more late in the swarm
        r["clip_low_frac"] = 0.01 * r["round"] if r["config"] == "swarm" else 0.0
        r["clip_high_frac"] = 0.02
    text = phases(records, parts=2)
    assert "| alone | 0.000 / 0.020 | 0.000 / 0.020 |" in text and "| swarm | 0.015 / 0.020 | 0.035 / 0.020 |" in text


def test_the_interval_over_questions_averages_each_question_over_the_pairs():
    # Three questions, two pairs. Swarm gains q1 in both pairs, loses q2 in one, ties q3 in both: per question
    # +1, -0.5, 0 (mean +1/6, interval over 3 questions); pairs that list no questions are left out.
    def ev(bits: dict[str, int]) -> dict:
        return {"eval_accuracy": 0.5, "per_question": [[q, g, 0] for q, g in bits.items()]}

    end = {(0, 0): ev({"q1": 1, "q2": 0, "q3": 1}), (0, 1): ev({"q1": 1, "q2": 1, "q3": 0}), (1, 0): {"eval_accuracy": 0.5}}
    base = {(0, 0): ev({"q1": 0, "q2": 1, "q3": 1}), (0, 1): ev({"q1": 0, "q2": 1, "q3": 0}), (1, 0): ev({"q1": 0})}
    iv = by_question(end, base, sorted(end))
    assert iv is not None and iv.n == 3
    assert iv.mean == pytest.approx((1 - 0.5 + 0) / 3)
    half = 4.303 * statistics.stdev([1, -0.5, 0]) / math.sqrt(3)
    assert iv.hi - iv.mean == pytest.approx(half)
    assert by_question({(0, 0): {"eval_accuracy": 1.0}}, base, [(0, 0)]) is None  # older evaluations: no questions


def test_with_a_held_out_set_per_seed_every_seeds_questions_count():
    # Seed 0 answers a1, a2; seed 1 answers b1, b2 (--heldout-per-seed): no question is common to all pairs,
    # and the interval is over the four, each averaged over its own seed's pairs.
    def ev(bits: dict[str, int]) -> dict:
        return {"eval_accuracy": 0.5, "per_question": [[q, g, 0] for q, g in bits.items()]}

    end = {(0, 0): ev({"a1": 1, "a2": 1}), (0, 1): ev({"a1": 1, "a2": 0}), (1, 0): ev({"b1": 1, "b2": 0})}
    base = {(0, 0): ev({"a1": 0, "a2": 1}), (0, 1): ev({"a1": 0, "a2": 1}), (1, 0): ev({"b1": 0, "b2": 0})}
    iv = by_question(end, base, sorted(end))
    assert iv is not None and iv.n == 4
    assert iv.mean == pytest.approx((1 - 0.5 + 1 + 0) / 4)


def test_task_course_shows_start_middle_and_end_per_task():
    def ev(a: float, b: float | None = None) -> dict:
        return {"eval_accuracy": a, "per_task": {"a": {"eval_accuracy": a}} | ({"b": {"eval_accuracy": b}} if b is not None else {})}

    evals = {("alone", 0): {"eval_start": {"0": ev(0.5, 0.2), "1": ev(0.7, 0.2)}, "eval_middle": {"0": ev(0.8), "1": ev(0.6)},
                            "eval": {"0": ev(0.9, 0.4), "1": ev(0.7, 0.6)}}}
    text = task_course(evals)
    assert "| alone | 0.600 / 0.700 / 0.800 | 0.200 / - / 0.500 |" in text
    assert task_course({}) == ""


def test_a_report_on_some_seeds_paired_with_another_configuration(run: Path, tmp_path: Path):
    # swarm+drop beats swarm by 0.1 a pair (agent) on seed 0; seed 1 is left out.
    _cell(run, "swarm+drop", 0, {0: [0.5, 0.4], 1: [0.5, 0.4]}, trained=4, external=2, round_s=720.0)
    text = report([run], tmp_path / "f.png", seeds={0}, against="swarm")
    assert "| alone | 1 x 2 x 2 | 0.80 (0.80-0.80) |" in text  # seed 1 is not in the table
    assert "Paired with swarm (same seed, same agent" in text
    assert "| swarm+drop | 2 | +0.10 [+0.10, +0.10] | 1.12x |" in text  # 1.8 / 1.6
    assert "| swarm+drop | 2 | +0.50 [+0.50, +0.50] | 2.25x |" in text  # and with alone: 1.8 / 0.8
    with pytest.raises(SapoError, match=r"no records of seed 7 \(the runs have seeds 0, 1\)"):
        report([run], tmp_path / "f.png", seeds={7})
    with pytest.raises(SapoError, match=r"no configuration 'swarm\+top' to pair with \(the runs have alone, swarm, swarm\+drop\)"):
        report([run], tmp_path / "f.png", against="swarm+top")


def test_the_report_command_takes_seeds_and_a_pairing(run: Path, capsys):
    from engine.commands.cli import main

    assert main(["experiment", "report", str(run), "--plot", str(run / "f.png"), "--seeds", "0", "--against", "swarm"]) == 0
    assert "Paired with swarm" in capsys.readouterr().out
    assert main(["experiment", "report", str(run), "--seeds", "x"]) == 2
    assert "expected comma-separated whole numbers, got 'x'" in capsys.readouterr().err


def test_rounds_recovered_from_checkpoints_count_in_rewards_but_not_in_counts_or_hours(tmp_path: Path):
    """A record recovered from a checkpoint's history carries the reward only: totals use it, the groups
    trained, reward per hour and cost leave it out instead of reading its missing counts as zeros."""
    _cell(tmp_path, "alone", 0, {0: [0.2, 0.4]}, trained=3, round_s=360.0)
    path = tmp_path / "alone" / "seed-0" / "records.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.startswith('{"type"')]
    lines[1] = {k: lines[1][k] for k in ("type", "config", "seed", "agent", "round", "reward_mean")} | {"recovered": True}
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    records, evals = load_runs([tmp_path])
    (row,) = table(records, evals)
    assert row.total == pytest.approx(0.6)  # both rounds' rewards
    assert row.trained_per_round == 3  # the recovered round's missing count is not a 0
    assert row.reward_per_hour == pytest.approx(0.2 / 0.1)  # the timed round's reward over its own hour
    from engine.lab.report import cost
    assert "2 agent-rounds (1 recovered from checkpoints, untimed" in cost(records, evals)
    assert "360.0 s per agent-round" in cost(records, evals)


def test_an_unfinished_cells_end_evaluations_pair_as_far_as_they_went(tmp_path: Path):
    """A session ended during a cell's end evaluations, and its checkpoints stayed on that machine: the agents
    evaluated at the last round pair with alone, the others are left out, and the report says so."""
    for config in ("alone", "swarm"):
        _cell(tmp_path, config, 0, {0: [0.1, 0.1], 1: [0.2, 0.2], 2: [0.3, 0.3]}, done=config == "alone")
        _meta(tmp_path, config, 0)
    cell = tmp_path / "swarm" / "seed-0"
    meta = json.loads((cell / "meta.json").read_text())
    (cell / "meta.json").write_text(json.dumps(meta | {"rounds": 2, "agents": 3}))
    (cell / "evals").mkdir()
    for agent, greedy in ((0, 0.7), (1, 0.6)):  # agent 2's end evaluation never ran
        (cell / "evals" / f"agent-{agent}-round-2.json").write_text(json.dumps(_evals(greedy, {"a": greedy})))
    (cell / "evals" / "agent-2-round-1.json").write_text(json.dumps(_evals(0.9, {})))  # not the end: never read
    start = tmp_path / "start" / "seed-0"
    start.mkdir(parents=True)
    for agent in range(3):
        (start / f"agent-{agent}.json").write_text(json.dumps(_evals(0.4, {})))
    records, evals = load_runs([tmp_path])
    assert evals[("swarm", 0)]["partial"] == {"agents": 2, "of": 3}
    assert set(evals[("swarm", 0)]["eval"]) == {"0", "1"} and set(evals[("swarm", 0)]["eval_start"]) == {"0", "1", "2"}
    (p,) = paired(records, evals)
    assert p.pairs == 3  # every agent's rounds pair in total reward
    assert p.greedy_diff is not None and p.greedy_diff.n == 2 and p.greedy_diff.mean == pytest.approx(0.15)  # 0.7, 0.6 - 0.5
    assert p.greedy_change is not None and p.greedy_change.mean == pytest.approx(0.25)
    (_, swarm) = table(records, evals)
    assert not swarm.complete and swarm.eval_greedy == pytest.approx(0.65)
    text = report([tmp_path], tmp_path / "f.png")
    assert "- swarm seed 0: end evaluations of 2 of 3 agents" in text and "| swarm (incomplete) |" in text
    # No end evaluation at all: no held-out results for the cell, as before.
    for e in (cell / "evals").glob("agent-*-round-2.json"):
        e.unlink()
    assert ("swarm", 0) not in load_runs([tmp_path])[1]


def test_rounds_offered_no_peers_group_are_named():
    """A sharing cell whose agents found nothing in the pool (a stopped run, a dead link) says so, by round."""
    from engine.lab.report import starved_note

    rec = lambda rnd, agent, cand: {"config": "swarm", "seed": 0, "round": rnd, "agent": agent,
                                    "external_candidates": cand}
    records = [rec(1, 0, 0), rec(2, 0, 8), rec(2, 1, 0), rec(3, 0, 0), rec(3, 1, 7),
               {"config": "alone", "seed": 0, "round": 2, "agent": 0}]  # alone has no such field
    note = starved_note(records)
    assert "- swarm seed 0: 2 of 4 agent-rounds (rounds 2, 3)" in note
    assert "- alone" not in note
    assert starved_note([rec(1, 0, 0), rec(2, 0, 8)]) == ""  # round 1 has no peers' groups yet: not counted
