"""The experiment runner: configuration names, records kept on resume, and a real run through a real relay
(2 agents, 2 rounds, the bundled model) killed mid-way and resumed."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.config import NodeConfig
from engine.errors import SapoError
from engine.lab.experiment import (Plan, Prefixed, cell_learning_rate, config_overrides, distinct_models, eval_per_task,
                                   keep_records, read_records, superseded)

pytestmark = pytest.mark.slow  # the real model: started first when the suite runs on several workers

TINY = ["--configs", "alone,swarm", "--agents", "2", "--rounds", "2", "--local", "2", "--external", "2",
        "--completions", "4", "--max-tokens", "24", "--tasks", "basic_arithmetic,chain_sum", "--fewshot", "1",
        "--eval-per-task", "1", "--threads", "1", "--workers", "2"]


def test_config_names():
    paper = {"external_selection": "uniform", "fill_dead_slots": False, "external_negatives": "onpolicy",
             "importance_cap": 0.0, "share_logprobs": False, "frontier": False}
    # a base name is the paper's way even though the node's defaults are now useful + fill + drop
    assert NodeConfig().external_selection == "useful" and NodeConfig().fill_dead_slots
    assert NodeConfig().external_negatives == "drop"
    # alone keeps I and J: with no relay its node makes the J groups itself, from a second question stream
    assert config_overrides("alone", 4, 4) == {"local_groups": 4, "external_groups": 4, **paper}
    assert config_overrides("swarm", 4, 4) == {"local_groups": 4, "external_groups": 4, **paper}
    assert config_overrides("swarm+useful+fill+drop", 2, 6) == {
        **paper, "local_groups": 2, "external_groups": 6, "external_selection": "useful", "fill_dead_slots": True,
        "external_negatives": "drop"}
    assert config_overrides("alone+fill+is2", 4, 4)["importance_cap"] == 2.0
    assert config_overrides("swarm+rare+fill+drop", 4, 4)["external_selection"] == "rare"
    with pytest.raises(SapoError, match="unknown modifier"):
        config_overrides("swarm+best", 4, 4)
    with pytest.raises(SapoError, match="must start with"):
        config_overrides("together", 4, 4)


def test_every_agent_answers_at_least_128_held_out_questions_whatever_the_mix():
    from engine.config import build_config

    assert eval_per_task(build_config({"preset": "easy"}, {})) == 43  # 3 tasks x 43 = 129
    four = build_config({"preset": "easy", "tasks": ["basic_arithmetic", "chain_sum", "calendar_arithmetic", "gcd"]}, {})
    assert eval_per_task(four) == 32
    assert eval_per_task(build_config({"preset": "paper"}, {})) == 15  # 9 tasks x 15 = 135


def test_a_model_named_more_than_once_gets_one_backbone():
    # --models a,a,a,b: one weaker model among three stronger ones; agent k runs entry k % 4, and the three
    # entries of a share a's backbone instead of loading it three times.
    names, slot = distinct_models(["smollm2-135m", "smollm2-135m", "smollm2-135m", "/m/gemma.gguf"])
    assert names == ["smollm2-135m", "/m/gemma.gguf"] and slot == [0, 0, 0, 1]
    assert distinct_models([None]) == ([None], [0])
    assert distinct_models(["b", "a", "b"]) == (["b", "a"], [0, 1, 0])


def test_each_configuration_trains_at_the_learning_rate_its_node_ships_with(tmp_path: Path):
    """The agents run offline with the relay injected: the node's own rule would give every one alone's rate."""
    plan = Plan(tmp_path, ["alone", "swarm", "swarm+useful+fill+drop"], [0], 2, 2, {})
    assert cell_learning_rate("alone", plan, 2) == 1e-4
    assert cell_learning_rate("swarm+useful+fill+drop", plan, 2) == cell_learning_rate("swarm+drop+fill+useful+frontier", plan, 2) == 2e-4
    assert cell_learning_rate("swarm+useful+fill+drop", plan, 0) == 1e-4  # J = 0 trains on no peer's group
    # Any other way of using peers' groups keeps alone's rate: uniform sharing at 2e-4 did worse (RESULTS.md, run 8)
    for other in ("swarm", "swarm+useful", "swarm+useful+fill", "swarm+useful+drop", "swarm+useful+fill+topr"):
        assert cell_learning_rate(other, plan, 2) == 1e-4, other
    given = dataclasses.replace(plan, settings={"learning_rate": 3e-4})  # --lr: every cell at it
    assert cell_learning_rate("alone", given, 2) == cell_learning_rate("swarm", given, 2) == 3e-4


def test_records_torn_line_and_resume_cut(tmp_path: Path):
    path = tmp_path / "records.jsonl"
    rows = [{"type": "round", "agent": a, "round": r} for r in (1, 2, 3) for a in (0, 1)]
    path.write_text("".join(json.dumps(x) + "\n" for x in rows) + json.dumps(rows[0]) + "\n" + '{"type": "rou')
    read = read_records(path)
    assert len(read) == 7  # the torn line is left out
    # agent 0 checkpointed round 3, agent 1 round 2: agent 1's round 3 reruns; the duplicate goes
    kept = keep_records(read, {0: 3, 1: 2})
    assert [(r["agent"], r["round"]) for r in kept] == [(0, 1), (1, 1), (0, 2), (1, 2), (0, 3)]


def test_records_and_results_from_after_the_checkpoints_are_superseded(tmp_path: Path):
    rows = [{"type": "round", "agent": a, "round": r} for r in (1, 2, 3) for a in (0, 1)]
    evals = [tmp_path / n for n in ("agent-0-round-2.json", "agent-1-round-2.json", "agent-1-round-3.json",
                                    "agent-10-round-1.json", "notes.json")]
    # agent 0 checkpointed round 3; agent 1's checkpoints are gone (another machine); agent 10 is not in this run
    late, stale = superseded(rows, evals, {0: 3, 1: 0})
    assert [(r["agent"], r["round"]) for r in late] == [(1, 1), (1, 2), (1, 3)]
    assert [p.name for p in stale] == ["agent-1-round-2.json", "agent-1-round-3.json", "agent-10-round-1.json"]
    assert superseded(rows, evals[:1], {0: 3, 1: 3}) == ([], [])  # an ordinary resume: nothing is stale


def test_each_line_of_a_worker_starts_with_its_name_once():
    out = io.StringIO()
    stream = Prefixed(out, "[worker 1] ")
    print("a line", file=stream)  # its text and its newline come in two writes
    stream.write("two\nlines\nand half")
    stream.write(" a line\n")
    assert out.getvalue() == "[worker 1] a line\n[worker 1] two\n[worker 1] lines\n[worker 1] and half a line\n"


def _env(cache: Path) -> dict[str, str]:
    return {**os.environ, "SAPO_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}


@pytest.mark.timeout(2400)  # two engine starts and five agent-rounds of the real model on a shared machine
def test_two_agents_paired_with_alone_share_through_a_real_relay_and_resume_after_a_kill(tmp_path: Path, model_cache: Path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "engine", "experiment", "--out", str(out), *TINY]
    records = out / "swarm" / "seed-0" / "records.jsonl"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(model_cache))
    try:
        deadline = time.monotonic() + 1500
        while len(read_records(records)) < 2:  # round 1 of both agents
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            assert time.monotonic() < deadline, "round 1 took too long"
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = read_records(records)
    assert not (out / "swarm" / "seed-0" / "done.json").exists()

    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=_env(model_cache))
    assert done.returncode == 0, done.stderr[-2000:]
    after = read_records(records)
    assert [(r["agent"], r["round"]) for r in after] == [(0, 1), (1, 1), (0, 2), (1, 2)]
    assert after[:2] == before[:2]  # what ran before the kill is kept, not rerun
    assert "ETA" in done.stderr
    for r in after:
        for key in ("reward_mean", "accuracy", "groups_trained", "external_groups", "round_s", "gen_s", "train_s"):
            assert key in r, key
    by = {(r["agent"], r["round"]): r for r in after}
    # agent 1 trains on agent 0's groups of the same round, through the relay, before and after the kill
    assert by[(1, 1)]["external_groups"] >= 1 and by[(1, 2)]["external_groups"] >= 1
    assert by[(0, 1)]["external_groups"] == 0  # nobody had published yet
    for r in after:  # every group of the round described, external ones with the receiver's accuracy on the task
        if r.get("recovered"):
            continue
        groups = r["group_summaries"]
        assert len(groups) == r["groups"] + r["external_groups"]
        assert sum(g["spread"] for g in groups) == r["groups_trained"]
        external = [g for g in groups if g["source"] != "own"]
        assert len(external) == r["external_groups"]
        # the receiver's accuracy on the task, once it has drawn that task itself
        assert all(0 <= g["own_accuracy"] <= 1 for g in external if "own_accuracy" in g)
    final = json.loads((out / "swarm" / "seed-0" / "done.json").read_text())
    assert set(final["eval"]) == {"0", "1"} and 0 <= final["eval"]["0"]["eval_sampled_accuracy"] <= 1
    # each held-out question's outcome, so a report can take its interval over questions too
    for e in final["eval"].values():
        rows = e["per_question"]
        assert len(rows) == e["eval_questions"] == len({q for q, _, _ in rows})
        assert sum(g for _, g, _ in rows) / len(rows) == pytest.approx(e["eval_accuracy"])
        assert all(0 <= s <= 2 for _, _, s in rows)
    # each agent has its own identity and its own checkpoints, at round 2
    keys = {(out / "swarm" / "seed-0" / f"agent-{k}" / "node.key").read_bytes() for k in (0, 1)}
    assert len(keys) == 2
    for k in (0, 1):
        latest = (out / "swarm" / "seed-0" / f"agent-{k}" / "checkpoints" / "smollm2-135m" / "LATEST").read_text().strip()
        assert latest == "round-000002"
    # the report reads it
    rep = subprocess.run([sys.executable, "-m", "engine", "experiment", "report", str(out)], capture_output=True,
                         text=True, timeout=300, env=_env(model_cache))
    assert rep.returncode == 0, rep.stderr[-2000:]
    assert "| swarm | 1 x 2 x 2 |" in rep.stdout
    assert "Paired with alone" in rep.stdout and "| swarm | 2 |" in rep.stdout
    assert "same questions' reward - alone" in rep.stdout
    assert "cost: 8 agent-rounds" in rep.stdout
    _assert_paired(out)

    # Another machine: the committed records and results arrive, agent 1's checkpoints (never committed) do not.
    # Its rounds run again; its old records and end result move aside instead of pairing with the rerun.
    cell = out / "swarm" / "seed-0"
    old_end = json.loads((cell / "evals" / "agent-1-round-2.json").read_text())
    shutil.rmtree(cell / "agent-1")
    (cell / "done.json").unlink()
    # And in alone, a kill right after agent 0's round-2 checkpoint, before its record line was written.
    lone = out / "alone" / "seed-0"
    lone_rows = read_records(lone / "records.jsonl")
    cut = next(r for r in lone_rows if (r["agent"], r["round"]) == (0, 2))
    (lone / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lone_rows if r is not cut))
    (lone / "done.json").unlink()
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=_env(model_cache))
    assert again.returncode == 0, again.stderr[-2000:]
    assert "swarm seed 0: 2 round records and 1 held-out results are from after the agents' checkpoints" in again.stderr
    moved = read_records(cell / "superseded" / "records.jsonl")
    assert moved == [r for r in after if r["agent"] == 1]
    assert json.loads((cell / "superseded" / "evals" / "agent-1-round-2.json").read_text()) == old_end
    rerun = read_records(records)
    assert sorted((r["agent"], r["round"]) for r in rerun) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert [r for r in rerun if r["agent"] == 0] == [r for r in after if r["agent"] == 0]  # agent 0 untouched
    final = json.loads((cell / "done.json").read_text())
    assert final["eval"]["1"] == json.loads((cell / "evals" / "agent-1-round-2.json").read_text())
    assert final["eval"]["1"]["round"] == 2
    # The cut round is recovered from agent 0's checkpoint, not rerun: its reward and its paired reward (the report
    # pairs agents on it), so a kill at that moment costs the run no pair.
    recovered = [r for r in read_records(lone / "records.jsonl") if r.get("recovered")]
    assert [(r["agent"], r["round"]) for r in recovered] == [(0, 2)]
    for key in ("reward_mean", "accuracy", "paired_reward_mean"):
        assert recovered[0][key] == pytest.approx(cut[key], abs=1e-4), key
    assert (lone / "done.json").exists()


TIMING = ("_s", "_ms")  # wall-clock figures: the only fields of a round record a rerun may change


@pytest.mark.timeout(2400)
def test_a_swarm_cell_run_again_repeats_every_round(tmp_path: Path, model_cache: Path):
    # Three agents, so that what a receiver gets from the relay is a draw (agent 2 samples among two authors'
    # groups): the experiment's relay draws per swarm from a seeded stream, so the same cell gives the same records.
    args = [*TINY, "--configs", "swarm+useful+fill+drop", "--agents", "3", "--workers", "1"]
    runs = []
    for name in ("first", "again"):
        out = tmp_path / name
        done = subprocess.run([sys.executable, "-m", "engine", "experiment", "--out", str(out), *args],
                              capture_output=True, text=True, timeout=1800, env=_env(model_cache))
        assert done.returncode == 0, done.stderr[-2000:]
        rows = read_records(out / "swarm_useful_fill_drop" / "seed-0" / "records.jsonl")
        runs.append([{k: v for k, v in r.items() if not k.endswith(TIMING)} for r in rows])
    first, again = runs
    assert [(r["round"], r["agent"]) for r in first] == [(n, a) for n in (1, 2) for a in range(3)]
    assert sum(r["external_groups"] for r in first) >= 3  # peers' groups were drawn and trained on
    assert again == first


def _assert_paired(ran: Path) -> None:
    """Same first I own questions per round in alone and swarm; one start evaluation shared by both."""
    cells = {c: read_records(ran / c / "seed-0" / "records.jsonl") for c in ("alone", "swarm")}
    rounds = {(a, n) for a in (0, 1) for n in (1, 2)}
    assert {(r["agent"], r["round"]) for r in cells["alone"]} == {(r["agent"], r["round"]) for r in cells["swarm"]} == rounds
    # A round whose line a kill cut (between its checkpoint and its record) is recovered from the checkpoint's
    # history: its reward and its paired reward, not its questions.
    alone = {(r["agent"], r["round"]): r["own_questions"] for r in cells["alone"] if not r.get("recovered")}
    swarm = {(r["agent"], r["round"]): r["own_questions"] for r in cells["swarm"] if not r.get("recovered")}
    for key in set(alone) & set(swarm):
        assert len(alone[key]) == 4  # I + J own questions: alone makes the J itself
        assert alone[key][:2] == swarm[key][:2], key  # the same first I, in the same order
    for r in cells["alone"] + cells["swarm"]:  # the reward on those first I, which the report pairs
        assert 0.0 <= r["paired_reward_mean"] <= 1.1, r
        assert r.get("recovered") or r["grad_norm"] >= 0.0  # before clipping: the report reads how often the clip acts
        # One update a round: the PPO clip holds nothing (it acts from a second update on), and the record says so.
        assert r.get("recovered") or r["clip_low_frac"] == r["clip_high_frac"] == 0.0
    if {(0, 1), (1, 1), (0, 2)} <= set(alone):
        assert alone[(0, 1)][:2] != alone[(1, 1)][:2]  # agents differ from each other
        assert alone[(0, 1)][:2] != alone[(0, 2)][:2]  # and rounds draw on
    for c, rate in (("alone", 1e-4), ("swarm", 1e-4)):  # what each cell ran on, once, though resumed, and its rate
        meta = json.loads((ran / c / "seed-0" / "meta.json").read_text())
        assert meta["settings"]["learning_rate"] == rate
        machines = meta["machines"]
        assert len(machines) == 1, machines
        assert machines[0]["train_dtype"] in ("bfloat16", "float32") and machines[0]["device"] == "cpu"
        assert machines[0]["cpu"] and machines[0]["cores"] >= 1 and len(machines[0]["commit"]) >= 7
        assert len(machines[0]["working"]) == 1 and machines[0]["working"][0].endswith(".gguf")
    for k in ("0", "1"):
        start = json.loads((ran / "start" / "seed-0" / f"agent-{k}.json").read_text())
        assert start["round"] == 0
        for c in ("alone", "swarm"):
            assert json.loads((ran / c / "seed-0" / "done.json").read_text())["eval_start"][k] == start


@pytest.mark.parametrize("args, message", [
    (["--agents", "0"], "at least one agent"),
    (["--rounds", "0"], "at least one agent, round"),
    (["--configs", "alone,swarm+best"], "unknown modifier 'best'"),
    (["--configs", "together"], "must start with 'alone' or 'swarm'"),
    (["--seeds", "0,x"], "--seeds must be comma-separated whole numbers"),
    (["--seeds", "0,-1"], "--seeds must be whole numbers >= 0"),  # ran, as seed -1
    (["--agents", "256"], "--agents must be at most 255"),  # each worker died on its first agent past 255
    (["--configs", "alone,alone"], "named once"),
    (["--workers", "0"], "--workers must be >= 1"),
    # gcd's easy settings hold 400 questions: 256 held-out ones would leave training fewer than they hold out
    # (at 100 questions and 128 held out, a run ran dry at round ~20)
    (["--tasks", "gcd", "--eval-per-task", "256", "--heldout-per-seed"], "task 'gcd': its settings hold too few"),
])
def test_impossible_settings_are_one_line_and_exit_2_before_any_work(tmp_path: Path, args, message):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "engine", "experiment", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert not out.exists()  # nothing made, nothing loaded


@pytest.mark.parametrize("where", ["a-file", "a-file/below"])
def test_an_out_that_cannot_be_a_directory_is_one_line_and_exit_2_before_any_work(tmp_path: Path, where):
    (tmp_path / "a-file").write_text("kept\n")
    out = tmp_path / where
    done = subprocess.run([sys.executable, "-m", "engine", "experiment", "--out", str(out), "--agents", "1",
                           "--rounds", "1"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sapo-engine: error: --out {out} "), done.stderr
    assert (tmp_path / "a-file").read_text() == "kept\n"  # two workers' tracebacks before; the file untouched now


@pytest.mark.parametrize("toml, message", [
    ("bogus = 1\n", "unknown setting 'bogus' in config file"),
    ("[task_config.gcd]\nmax_value = 10\n", "task 'gcd': its settings hold too few"),  # the file's tasks are checked
    ("learning_rate = 'fast'\n", "invalid setting"),
])
def test_a_bad_settings_file_is_one_line_and_exit_2_before_any_work(tmp_path: Path, toml, message):
    (tmp_path / "s.toml").write_text(toml)
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "engine", "experiment", "--out", str(out), "--config",
                           str(tmp_path / "s.toml"), "--tasks", "gcd", "--eval-per-task", "64"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert not out.exists()


def test_workers_take_cells_seed_major_each_under_a_claim_no_one_else_holds(tmp_path: Path):
    """Workers walk the cells seed-major and run each cell they can claim: a cell another worker (or another
    experiment on the same --out) holds is passed over, and a killed holder leaves nothing claimed."""
    from engine.lab.experiment import Plan, claim, workers_for

    plan = Plan(tmp_path, ["alone", "swarm", "swarm+useful"], [0, 1], 4, 10, {})
    assert plan.all_cells() == [("alone", 0), ("swarm", 0), ("swarm+useful", 0),
                                ("alone", 1), ("swarm", 1), ("swarm+useful", 1)]
    assert [p.worker for p in workers_for(plan, 2)] == [0, 1]
    assert len(workers_for(plan, 99)) == 6 and len(workers_for(plan, 1)) == 1  # never more workers than cells
    a, b = tmp_path / "alone" / "seed-0", tmp_path / "swarm" / "seed-0"
    with claim(a) as first:
        with claim(a) as second, claim(b) as other:
            assert first and not second and other
    with claim(a) as again:
        assert again  # released with its block
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from engine.lab.experiment import claim\n"
                               "with claim(Path(sys.argv[1])) as got:\n print(got, flush=True); time.sleep(600)", str(a)],
                              stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1])
    try:
        assert holder.stdout.readline().strip() == "True"
        with claim(a) as mine:
            assert not mine  # another process holds it
        holder.kill()
        holder.wait(30)
        with claim(a) as mine:
            assert mine  # the OS dropped a killed holder's lock
    finally:
        holder.kill()


def test_a_cell_another_experiment_holds_is_left_to_it(tmp_path: Path, model_cache: Path):
    """Two experiments started on one --out: the second passes over the cell the first is running, says so, and
    writes nothing into it; its relay takes a folder of its own, not the first one's worker-0."""
    from engine.lab.experiment import claim, relay_folder

    out = tmp_path / "run"
    cell = out / "alone" / "seed-0"
    with claim(cell) as mine, relay_folder(out / "relay", 0) as first:  # the first experiment, mid-cell
        assert mine and first.name == "worker-0"
        done = subprocess.run([sys.executable, "-m", "engine", "experiment", "--out", str(out), "--configs", "alone",
                               "--agents", "1", "--rounds", "1", "--tasks", "basic_arithmetic", "--eval-per-task", "1",
                               "--max-tokens", "8", "--threads", "1"],
                              capture_output=True, text=True, timeout=600, env=_env(model_cache))
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"not run here, another experiment on {out} holds them: alone seed 0" in done.stderr
    assert sorted(p.name for p in cell.iterdir()) == ["running.lock"]  # no meta, records or agents written
    assert not (out / "relay" / "worker-0" / "relay.log").exists()
    assert b"listening on" in (out / "relay" / "worker-1" / "relay.log").read_bytes()


def test_the_progress_line_counts_the_whole_run_across_workers():
    """Every worker's line counts and times the run as a whole: one total, one count, one pace."""
    import io

    from engine.lab.experiment import EtaPrinter, Progress

    shared = Progress.start(10)
    shared.t0 -= 100  # 100 s into the run
    w0, w1 = io.StringIO(), io.StringIO()
    EtaPrinter(shared, w0).tick("a")
    p1 = EtaPrinter(shared, w1)
    p1.skip(2)  # a resumed cell found 2 of its agent-rounds done
    p1.tick("b")
    assert w0.getvalue().startswith("[1/10 agent-rounds, 1m40s elapsed, ETA 15m00s] a")
    assert w1.getvalue().startswith("[2/8 agent-rounds, 1m40s elapsed, ETA 5m00s] b")


def test_the_eta_follows_the_recent_pace_not_a_slow_start():
    """A start evaluation of 1,000 s, then agent-rounds of 10 s: the ETA soon reads 10 s a round left."""
    import io

    from engine.lab.experiment import PACE_WINDOW, EtaPrinter, Progress

    now = [1000.0]
    shared = Progress.start(200)
    shared.t0 = 0.0
    out = io.StringIO()
    eta = EtaPrinter(shared, out, clock=lambda: now[0])
    eta.tick("first")  # 1,000 s for one agent-round: the whole run's pace so far
    for k in range(PACE_WINDOW + 5):
        now[0] += 10
        eta.tick(f"round {k}")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[1/200 agent-rounds, 16m40s elapsed, ETA 55h16m]")  # 199 x 1,000 s
    left = 200 - (PACE_WINDOW + 6)
    assert lines[-1].startswith(f"[{200 - left}/200 agent-rounds, 24m10s elapsed, ETA {left * 10 // 60}m{left * 10 % 60:02d}s]")


def test_a_start_evaluation_of_another_held_out_set_is_refused(tmp_path: Path, model_cache: Path):
    """Every configuration of a seed shares its start evaluations: a later run asking another held-out set into the
    same --out (another draw, or another --eval-per-task) must not pair its ends with them."""
    from engine.tasks.questions import build_mix, heldout_set, question_key

    out = tmp_path / "run"

    def experiment(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "engine", "experiment", "--out", str(out), "--configs", "alone",
                               "--agents", "1", "--rounds", "1", "--completions", "2", "--max-tokens", "8",
                               "--tasks", "basic_arithmetic", "--threads", "1", "--workers", "1", *extra],
                              capture_output=True, text=True, timeout=900, env=_env(model_cache))

    done = experiment("--eval-per-task", "2", "--heldout-per-seed")  # seed 0 evaluates on held-out set 1
    assert done.returncode == 0, done.stderr[-2000:]
    start = json.loads((out / "start" / "seed-0" / "agent-0.json").read_text())
    mix = build_mix("easy", tasks=["basic_arithmetic"])
    assert [q for q, _, _ in start["per_question"]] == [question_key(q) for q in heldout_set(mix, 2, 1)]
    assert [q for q, _, _ in start["per_question"]] != [question_key(q) for q in heldout_set(mix, 2)]

    shutil.rmtree(out / "alone")  # the cell again, on every node's held-out set: same count, other questions
    done = experiment("--eval-per-task", "2")
    assert done.returncode == 2 and "measured on other held-out questions" in done.stderr, done.stderr[-2000:]
    shutil.rmtree(out / "alone")  # (the refused run's cell holds its settings: that alone would refuse the next)
    done = experiment("--eval-per-task", "1", "--heldout-per-seed")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "measured on 2 held-out questions, this run asks 1" in done.stderr
    assert not read_records(out / "alone" / "seed-0" / "records.jsonl")  # no round run against the wrong start


def test_a_start_evaluation_another_worker_holds_is_skipped_then_read(tmp_path: Path):
    """Two workers share a seed's start evaluations: while one measures agent k (holding its lock), the other
    moves on (None at once) instead of waiting, and reads agent k's result once it is written."""
    import fcntl
    from types import SimpleNamespace

    from engine.lab.experiment import _held_out

    path = tmp_path / "start" / "agent-0.json"
    path.parent.mkdir(parents=True)
    agent = SimpleNamespace(node=SimpleNamespace(heldout=[object()] * 4))
    with open(path.with_suffix(".lock"), "w") as other:  # the other worker, measuring
        fcntl.flock(other, fcntl.LOCK_EX)
        assert _held_out(agent, path, "at the start", None, wait=False) is None
        path.write_text(json.dumps({"eval_accuracy": 0.5, "eval_questions": 4}))
    assert _held_out(agent, path, "at the start", None, wait=False) == {"eval_accuracy": 0.5, "eval_questions": 4}


def test_a_record_after_the_records_file_was_replaced_lands_in_the_new_file(tmp_path: Path):
    """A git stash or checkout replaces the file under a running experiment: the next round's line must
    land in the file at that path, not in the old one a held handle would still write to."""
    from engine.lab.experiment import append_record, read_records

    path = tmp_path / "records.jsonl"
    append_record(path, {"round": 1})
    replacement = tmp_path / "replacement"
    replacement.write_text(path.read_text())
    os.replace(replacement, path)  # as git writes a file: a new inode under the same name
    append_record(path, {"round": 2})
    assert read_records(path) == [{"round": 1}, {"round": 2}]
