"""A node end to end on the real model: trains, swaps, checkpoints, survives SIGKILL."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.threads import THREADS

pytestmark = pytest.mark.slow  # the real model: started first when the suite runs on several workers

NODE_ID = "5a90" * 8
SMALL = ["--model", "smollm2-135m", "--offline", "--tasks", "basic_arithmetic", "--local", "4", "--external", "0",
         "--completions", "4", "--max-tokens", "24", "--eval-every", "0", "--threads", str(THREADS), "--quiet"]


def _env(cache: Path) -> dict[str, str]:
    return {**os.environ, "SAPO_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}


def _prepare(data: Path) -> Path:
    data.mkdir(parents=True, exist_ok=True)
    (data / "node.json").write_text(json.dumps({"node_id": NODE_ID}))  # fixed id: deterministic questions
    return data


def _events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_engine(data: Path, cache: Path, rounds: int, *extra: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess, list[dict]]:
    ev = data / f"events-{time.monotonic_ns()}.jsonl"
    proc = subprocess.run([sys.executable, "-m", "engine", "run", *SMALL, "--rounds", str(rounds), "--data-dir", str(data),
                           "--events", str(ev), *extra], capture_output=True, text=True, timeout=timeout, env=_env(cache))
    return proc, _events(ev)


def start_engine(data: Path, cache: Path, rounds: int, ev: Path, until: str) -> subprocess.Popen:
    """``sapo-engine run`` in the background, returned once its events file shows an ``until`` event."""
    proc = subprocess.Popen([sys.executable, "-m", "engine", "run", *SMALL, "--rounds", str(rounds), "--data-dir",
                             str(data), "--events", str(ev)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=_env(cache))
    deadline = time.monotonic() + 600
    while not any(e["type"] == until for e in _events(ev)):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"no {until} event: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.2)
    return proc


@pytest.fixture(scope="module")
def trained(tmp_path_factory, model_cache):
    data = _prepare(tmp_path_factory.mktemp("node") / "data")
    proc, events = run_engine(data, model_cache, 2)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return data, events


def test_every_event_the_engine_wrote_decodes_to_its_typed_contract(trained):
    """The events file of a real run, line by line, against wire.events: nothing unknown, nothing lost."""
    import msgspec

    from wire import events as ev

    data, events = trained
    assert {"start", "state", "phase", "round", "stop"} <= {e["type"] for e in events}
    for raw in events:
        typed = ev.decode_event(json.dumps(raw))
        assert typed is not None, raw["type"]  # a known event type
        # Re-encoded, the typed event says exactly what the engine wrote: no field outside the contract.
        assert msgspec.json.decode(ev.encode(typed)) == raw
    start = next(e for e in events if e["type"] == "start")
    assert start["schema"] == ev.SCHEMA_VERSION
    import torch

    if not torch.cuda.is_available() and not torch.backends.mps.is_available():  # where it computes, as the engine chose it (engine/models/accel.py)
        assert (start["trains_on"], start["samples_on"]) == ("cpu", "cpu")
        assert start["accel_fix"] in ("", "SAPO_ACCEL=cuda scripts/setup.sh")  # a fix only where a GPU sits idle


def test_two_offline_rounds_train_and_swap(trained):
    from safetensors.torch import load_file

    data, events = trained
    rounds = [e for e in events if e["type"] == "round"]
    assert [e["round"] for e in rounds] == [1, 2]
    for e in rounds:
        for key in ("reward_mean", "accuracy", "format_rate", "gen_tokens", "gen_tokens_per_s", "loss", "train_s",
                    "swap_ms", "groups_trained", "groups_dropped", "tokens_trained"):
            assert key in e, key
        # Budget 4; own groups without spread are dropped and (fill_dead_slots, the default) refilled by
        # one more batch of own draws, so at most 4 train and at least 4 were drawn.
        assert e["groups_trained"] <= 4 <= e["groups_trained"] + e["groups_dropped"]
    assert sum(e["groups_trained"] for e in rounds) > 0, "no group had reward spread: nothing was trained"
    trained_rounds = [e for e in rounds if e["groups_trained"]]
    assert all(e["swap_ms"] > 0 and e["tokens_trained"] > 0 for e in trained_rounds)
    # Where the time went, and what training processed: each prompt once per group, completions apart.
    for e in rounds:
        assert e["gen_s"] > 0 and 0 <= e["score_s"] < e["round_s"] and e["checkpoint_ms"] > 0
        assert e["eval_s"] is None  # no evaluation in these rounds
        parts = e["gen_s"] + e["score_s"] + e["train_s"] + (e["swap_ms"] + e["checkpoint_ms"]) / 1000
        assert parts <= e["round_s"]
        assert e["train_completion_tokens"] == e["tokens_trained"]
        # alone there are no peers' negatives to skip: only an answer exactly at its group's mean could be
        assert e["train_completion_tokens_computed"] <= e["train_completion_tokens"]
        assert (e["train_completion_tokens_computed"] > 0) == (e["train_completion_tokens"] > 0)
        # Sampling as a prefix tree: a task's preamble is decoded once per batch, not once per question.
        assert 0 < e["gen_prompt_tokens_computed"] < e["gen_prompt_tokens"]
    for e in trained_rounds:
        assert e["train_s"] > 0 and e["train_prompt_tokens"] > 0
        # Few-shot prompts are ~150 tokens: a group's prompt is far longer than one answer of at most 24.
        assert e["train_prompt_tokens"] / e["groups_trained"] > 50
        # Training as a prefix tree: a micro-batch's common beginning (chat template, system prompt) runs once.
        assert 0 < e["train_prompt_tokens_computed"] <= e["train_prompt_tokens"]
    several = [e for e in trained_rounds if e["groups_trained"] > 1]
    assert not several or any(e["train_prompt_tokens_computed"] < e["train_prompt_tokens"] for e in several)
    # The LoRA moved away from its initialisation (peft starts B at zero)...
    ckpt = data / "checkpoints" / "smollm2-135m" / "round-000002"
    weights = load_file(str(ckpt / "adapter_model.safetensors"))
    assert any("lora_B" in k and v.abs().max() > 0 for k, v in weights.items())
    # ... and llama.cpp runs it: exactly one adapter file is live.
    assert len(list((data / "adapters").glob("*.gguf"))) == 1
    assert (data / "checkpoints" / "smollm2-135m" / "LATEST").read_text().strip() == "round-000002"


def test_rerun_with_same_target_does_nothing_more(trained, model_cache, tmp_path):
    data, _ = trained
    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    proc, events = run_engine(copy, model_cache, 2)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not [e for e in events if e["type"] == "round"]
    assert any(e["type"] == "status" and "resumed from round-000002" in e["message"] for e in events)


def test_another_model_in_the_same_data_dir_starts_its_own_training(trained, working_gguf, model_cache, tmp_path):
    """A volunteer who switches model (Preferences) trains the new one from round 1; the first model's
    checkpoints stay for when they switch back, and export asks which one when there are several."""
    data, _ = trained
    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    proc, events = run_engine(copy, model_cache, 1, "--model", str(working_gguf))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [e["round"] for e in events if e["type"] == "round"] == [1]
    assert not any(e["type"] == "status" and "resumed" in e["message"] for e in events)
    assert sorted(p.name for p in (copy / "checkpoints").iterdir()) == sorted(["smollm2-135m", working_gguf.stem.lower()])
    assert (copy / "checkpoints" / "smollm2-135m" / "LATEST").read_text().strip() == "round-000002"
    # Switching back: the first model resumes at its round 2, and its past is its own rounds, not the other's.
    proc, events = run_engine(copy, model_cache, 2)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert any(e["type"] == "status" and "resumed from round-000002" in e["message"] for e in events)
    (history,) = [e for e in events if e["type"] == "history"]
    first_run = [e for e in trained[1] if e["type"] == "round"]
    assert [(e["round"], e["reward_mean"]) for e in history["events"] if e["type"] == "round"] == \
        [(e["round"], e["reward_mean"]) for e in first_run]
    bad = subprocess.run([sys.executable, "-m", "engine", "export", "--data-dir", str(copy), "--model", "nope",
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=120, env=_env(model_cache))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "nope" in bad.stderr and "smollm2-135m" in bad.stderr


def test_sigkill_mid_round_resumes_from_the_last_checkpoint(tmp_path, model_cache):
    from safetensors.torch import load_file

    from engine.learning.checkpoint import lora_digest

    data = _prepare(tmp_path / "data")
    ev = tmp_path / "killed.jsonl"
    proc = start_engine(data, model_cache, 5, ev, until="round")
    try:
        time.sleep(1.5)  # well inside round 2: generating or training
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    done = max(e["round"] for e in _events(ev) if e["type"] == "round")
    latest = (data / "checkpoints" / "smollm2-135m" / "LATEST").read_text().strip()
    assert latest == f"round-{done:06d}"
    expected = lora_digest(load_file(str(data / "checkpoints" / "smollm2-135m" / latest / "adapter_model.safetensors")))

    proc2, events = run_engine(data, model_cache, done + 1)
    assert proc2.returncode == 0, proc2.stderr[-2000:]
    resumed = [e for e in events if e["type"] == "status" and "resumed" in e["message"]]
    assert resumed and resumed[0]["round"] == done and resumed[0]["lora_digest"] == expected
    assert [e["round"] for e in events if e["type"] == "round"] == [done + 1]


def test_a_damaged_checkpoint_is_set_aside_and_training_goes_on_from_the_one_before(trained, model_cache, tmp_path):
    """A failing disk or a sync tool damages the newest checkpoint: the node says so, keeps it aside, and goes on
    from the one before, a round earlier, without a hand on its files (it used to stop, and the advice it gave,
    followed, ended in training from the beginning)."""
    data, _ = trained
    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    ckpts = copy / "checkpoints" / "smollm2-135m"
    weights = ckpts / "round-000002" / "adapter_model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[-10] ^= 0xFF
    weights.write_bytes(bytes(blob))
    proc, events = run_engine(copy, model_cache, 3)
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = [e["message"] for e in events if e["type"] == "warning"]
    assert any("round-000002 is damaged" in w and "set aside as damaged-round-000002" in w for w in warnings), warnings
    assert any(e["type"] == "status" and e["message"] == "resumed from round-000001" for e in events)
    assert [e["round"] for e in events if e["type"] == "round"] == [2, 3]  # round 2 again, counted once
    assert (ckpts / "damaged-round-000002" / "adapter_model.safetensors").read_bytes() == bytes(blob)
    assert (ckpts / "LATEST").read_text().strip() == "round-000003"
    history = json.loads((ckpts / "round-000003" / "state.json").read_text())["history"]
    assert [h["round"] for h in history if h.get("type") != "eval"] == [1, 2, 3]
    # export, beside it, passes over a damaged newest checkpoint as well, and moves nothing
    blob = bytearray((ckpts / "round-000003" / "optimizer.pt").read_bytes())
    blob[-10] ^= 0xFF
    (ckpts / "round-000003" / "optimizer.pt").write_bytes(bytes(blob))
    out = tmp_path / "out"
    exp = subprocess.run([sys.executable, "-m", "engine", "export", "--data-dir", str(copy), str(out)],
                         capture_output=True, text=True, timeout=600, env=_env(model_cache))
    assert exp.returncode == 0, exp.stderr[-2000:]
    assert "round-000003 is damaged" in exp.stdout and "exported round-000002" in exp.stdout
    assert (ckpts / "round-000003").is_dir() and (ckpts / "LATEST").read_text().strip() == "round-000003"


def test_export_writes_a_peft_adapter_and_a_llama_cpp_adapter(trained, model_cache, tmp_path):
    from engine.sampling.llm import LlamaModel

    data, _ = trained
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "engine", "export", "--data-dir", str(data), str(out)],
                          capture_output=True, text=True, timeout=300, env=_env(model_cache))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "peft" / "adapter_model.safetensors").is_file() and (out / "peft" / "adapter_config.json").is_file()
    assert "llama.cpp" in (out / "README.md").read_text()
    state = json.loads((data / "checkpoints" / "smollm2-135m" / "round-000002" / "state.json").read_text())
    llm = LlamaModel(Path(state["config"]["model_path"]), n_ctx=256, n_seq_max=1, threads=THREADS)
    try:
        tokens = llm.tokenize("Calculate 2 + 3. <answer>5</answer>")
        base = llm.token_logprobs(tokens, 1)
        llm.swap_adapter(out / "lora.gguf")
        tuned = llm.token_logprobs(tokens, 1)
    finally:
        llm.close()
    assert abs(tuned - base).max() > 1e-4  # the exported adapter is live and non-trivial


def test_export_without_checkpoint_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "engine", "export", "--data-dir", str(tmp_path), str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no checkpoint" in proc.stderr and "Traceback" not in proc.stderr


def test_an_evaluating_round_reports_its_cost(tmp_path, model_cache):
    data = _prepare(tmp_path / "data")
    proc, events = run_engine(data, model_cache, 1, "--eval-every", "1", "--eval-per-task", "3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    evals = [e for e in events if e["type"] == "eval"]
    assert [e["round"] for e in evals] == [0, 1]  # the baseline, then after round 1
    assert all(e["eval_questions"] == 3 and e["eval_s"] > 0 for e in evals)
    (rnd,) = [e for e in events if e["type"] == "round"]
    assert rnd["eval_s"] == pytest.approx(evals[1]["eval_s"], abs=0.02)  # the baseline is not round 1's time
    assert rnd["eval_s"] < rnd["round_s"]


def test_frontier_levels_are_reported_and_kept_across_a_resume(tmp_path, model_cache):
    """With --frontier each round event says every task's level; the levels and their averages live in the
    checkpoint's stream state, and a resumed node goes on from them (engine/tasks/frontier.py)."""
    from engine.tasks import frontier
    from engine.tasks.questions import build_mix

    data = _prepare(tmp_path / "data")
    proc, events = run_engine(data, model_cache, 2, "--frontier", "--local", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rounds = [e for e in events if e["type"] == "round"]
    assert [set(e["task_levels"]) for e in rounds] == [{"basic_arithmetic"}] * 2
    state = json.loads((data / "checkpoints" / "smollm2-135m" / "round-000002" / "state.json").read_text())
    saved = state["stream"]["levels"]["basic_arithmetic"]
    assert saved["level"] == rounds[-1]["task_levels"]["basic_arithmetic"]
    top = frontier.top_level("basic_arithmetic", build_mix("easy", tasks=["basic_arithmetic"])[0].config)
    assert 0 <= saved["level"] <= min(top, sum(len(e["level_changes"]) for e in rounds))

    proc, events = run_engine(data, model_cache, 3, "--frontier", "--local", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (third,) = [e for e in events if e["type"] == "round"]
    after = json.loads((data / "checkpoints" / "smollm2-135m" / "round-000003" / "state.json").read_text())["stream"]["levels"]
    move = third["level_changes"].get("basic_arithmetic", 0)
    assert after["basic_arithmetic"]["level"] == saved["level"] + move == third["task_levels"]["basic_arithmetic"]
    if not move:  # the average went on from the checkpoint's: every own group of the round graded on top
        assert after["basic_arithmetic"]["graded"] == saved["graded"] + third["groups"]


def _on_a_small_disk(disk: Path, size_mb: int, script: str, cache: Path) -> subprocess.CompletedProcess:
    """Run ``script`` (sh) in a private mount namespace with a ``size_mb`` tmpfs on ``disk``: a real full disk,
    gone with the namespace (root: ``unshare -m``; otherwise a user namespace, ``unshare -r -m``)."""
    disk.mkdir(parents=True, exist_ok=True)
    prefix = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-r", "-m"]
    probe = subprocess.run([*prefix, "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {disk}"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a private namespace here: {probe.stderr.strip()}")
    return subprocess.run([*prefix, "sh", "-c", f"mount -t tmpfs -o size={size_mb}m tmpfs {disk} && {script}"],
                          capture_output=True, text=True, timeout=900, env=_env(cache))


# 90 MB: round 2's adapter export finds the disk full; 150 MB (two checkpoints of ~60 MB at the default LoRA rank
# and the adapters): a later round's checkpoint does, where torch reports it as a RuntimeError, not ENOSPC
@pytest.mark.parametrize("size_mb", [90, 150], ids=["adapter-export", "checkpoint"])
def test_a_full_disk_is_a_one_line_error_and_the_last_checkpoint_stands(tmp_path, model_cache, size_mb):
    # A volunteer's disk fills up mid-run: the node must say so in one line (the app shows it), keep its last
    # complete checkpoint, leave no half-written one behind, and go on from it once there is room.
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    kept.mkdir()
    data = disk / "data"
    node = shlex.quote(json.dumps({"node_id": NODE_ID}))
    run = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "engine", "run", *SMALL, "--rounds", "6",
                                            "--data-dir", str(data), "--events", str(kept / "events.jsonl")])
    proc = _on_a_small_disk(disk, size_mb, f"mkdir -p {data} && printf %s {node} > {data}/node.json && "
                                       f"{{ {run} 2> {kept}/stderr; echo $? > {kept}/rc; }}; cp -a {data} {kept}/data", model_cache)
    assert proc.returncode == 0, proc.stderr[-2000:]
    stderr = (kept / "stderr").read_text().strip().splitlines()
    assert (kept / "rc").read_text().strip() == "2", stderr[-20:]
    assert len(stderr) == 1 and "disk is full" in stderr[0], stderr[-20:]
    errors = [e for e in _events(kept / "events.jsonl") if e["type"] == "error"]
    assert [e["kind"] for e in errors] == ["user"] and "disk is full" in errors[0]["message"]
    done = max(e["round"] for e in _events(kept / "events.jsonl") if e["type"] == "round")
    assert 1 <= done < 6

    from engine.learning.checkpoint import CheckpointStore

    store = CheckpointStore(kept / "data" / "checkpoints" / "smollm2-135m")
    latest = store.latest()
    assert latest is not None and latest.name == f"round-{done:06d}"
    store.verify(latest)  # complete and matching its manifest
    assert not list(store.root.glob(".round-*.tmp*")) and not list((kept / "data" / "adapters").glob(".*.tmp"))

    proc2, events = run_engine(kept / "data", model_cache, done + 1)  # room again: it goes on from there
    assert proc2.returncode == 0, proc2.stderr[-2000:]
    assert [e["round"] for e in events if e["type"] == "status" and "resumed" in e["message"]] == [done]
    assert [e["round"] for e in events if e["type"] == "round"] == [done + 1]


def test_a_second_node_on_the_same_data_dir_is_refused_and_the_first_goes_on(tmp_path, model_cache):
    # Two nodes on one folder would overwrite each other's checkpoints and adapters (both hung, one with a
    # traceback, before the folder was locked)
    data = _prepare(tmp_path / "data")
    ev = tmp_path / "first.jsonl"
    first = start_engine(data, model_cache, 2, ev, until="start")
    try:
        second, events = run_engine(data, model_cache, 2)
        assert second.returncode == 2
        assert second.stderr.strip() == (f"sapo-engine: error: another node (process {first.pid}) is already running "
                                         f"on {data}: stop it first, or give this one its own --data-dir")
        assert [e["kind"] for e in events if e["type"] == "error"] == ["user"]  # the app shows the same line
        assert first.wait(600) == 0, first.stderr.read().decode()[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
    assert [e["round"] for e in _events(ev) if e["type"] == "round"] == [1, 2]
    again, _ = run_engine(data, model_cache, 3)  # the lock went with the first node
    assert again.returncode == 0, again.stderr[-2000:]
