"""The headless CLI on bad input: one clear line on stderr, non-zero exit, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def sapo(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("sapo-engine: error: ")
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def data(tmp_path: Path) -> str:
    return str(tmp_path / "data")


def test_unknown_model_name_suggests_close_ones(data):
    proc = sapo("run", "--offline", "--rounds", "1", "--data-dir", data, "--model", "qwen2.5-0.5bb")
    assert_one_line_error(proc, "qwen2.5-0.5b")


def test_missing_gguf(data, tmp_path):
    assert_one_line_error(sapo("run", "--offline", "--data-dir", data, "--model", str(tmp_path / "nope.gguf")),
                          "nope.gguf")


def test_corrupt_gguf(data, tmp_path, bundled_gguf):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(bundled_gguf.read_bytes()[:4096])  # truncated: header intact, tensors gone
    assert_one_line_error(sapo("run", "--offline", "--data-dir", data, "--model", str(bad)), "broken.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all" * 100)
    assert_one_line_error(sapo("run", "--offline", "--data-dir", data, "--model", str(junk)), "junk.gguf")


def test_unsupported_architecture(data, tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "gpt2.gguf"
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert_one_line_error(sapo("run", "--offline", "--data-dir", data, "--model", str(path)), "gpt2")


@pytest.mark.parametrize("flags, needle", [
    (["--tasks", "basic_arithmetic,not_a_task"], "not_a_task"),
    (["--completions", "1"], "completions"),
    (["--rounds", "-3"], "rounds"),
    (["--rounds", "three"], "whole number"),
    (["--max-tokens", "0"], "max tokens"),
    (["--threads", "0"], "threads must be 1..1024, got 0"),
    (["--threads", "10000"], "threads must be 1..1024, got 10000"),  # said ">= 1" of 10000
    (["--cpu-limit", "0"], "cpu_limit must be 1..100"),
    (["--cpu-limit", "150"], "cpu_limit must be 1..100"),
    (["--priority", "high"], "priority must be one of low, normal"),
    (["--local", "-1"], "local"),
    (["--local", "0", "--external", "0"], "budget"),
    (["--preset", "impossible"], "preset"),
    (["--weights", "q3"], "weights"),
    (["--temperature", "0"], "temperature"),
    (["--no-such-flag"], "unrecognized"),
    (["--optimizer", "lion"], "optimizer"),
    (["--relay", "http://example"], "relay URL"),
    (["--relay", "ws://a:1,http://example"], "relay URL"),  # a list of replicas: each one checked
    (["--relay", " , "], "relay must be one or more URLs"),
])
def test_invalid_settings(data, flags, needle):
    assert_one_line_error(sapo("run", "--offline", "--data-dir", data, "--model", "smollm2-135m", *flags), needle)


def test_bad_config_files(data, tmp_path):
    missing = tmp_path / "none.toml"
    assert_one_line_error(sapo("run", "--offline", "--data-dir", data, "--config", str(missing)), "not found")
    broken = tmp_path / "broken.toml"
    broken.write_text("completions = = 3\n")
    assert_one_line_error(sapo("run", "--offline", "--data-dir", data, "--config", str(broken)), "not valid TOML")
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("complitions = 3\n")
    assert_one_line_error(sapo("run", "--offline", "--data-dir", data, "--config", str(unknown)), "complitions")
    wrong_type = tmp_path / "type.toml"
    wrong_type.write_text('completions = "lots"\n')
    assert_one_line_error(sapo("run", "--offline", "--data-dir", data, "--config", str(wrong_type)), "completions")


def test_a_starting_level_outside_the_caps_is_refused_before_any_work(data, tmp_path):
    levels = tmp_path / "levels.toml"
    levels.write_text("[task_levels]\nbf = 1\n")  # bf is not a task of the easy preset
    assert_one_line_error(sapo("run", "--offline", "--data-dir", data, "--model", "smollm2-135m", "--config", str(levels)),
                          "'bf' is not a task")
    levels.write_text("[task_levels]\ngcd = 99\n")
    proc = sapo("run", "--offline", "--data-dir", data, "--model", "smollm2-135m", "--config", str(levels))
    assert_one_line_error(proc, "gcd level 99 is outside its ladder 0..")
    assert proc.returncode == 2 and not (Path(data) / "checkpoints").exists()


def test_unwritable_data_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_one_line_error(sapo("run", "--offline", "--data-dir", str(blocker / "sub")), "not writable")


@pytest.mark.parametrize("args, name", [
    (["identity", "--data-dir", ""], "--data-dir"), (["run", "--offline", "--data-dir", ""], "--data-dir"),
    (["export", "", "--data-dir", "x"], "out"), (["experiment", "--out", ""], "--out"),
    (["baseline", "--config", ""], "--config"),
])
def test_an_empty_path_is_refused_not_read_as_the_working_directory(tmp_path, args, name):
    # `--data-dir "$UNSET"` made an identity in whatever directory the command ran from
    proc = sapo(*args, cwd=tmp_path)
    assert_one_line_error(proc, f"argument {name}: expected a path, got ''")
    assert proc.returncode == 2 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, needle", [
    (["--join", ""], "invite link: the invite link is empty"),  # was read as "no link": a node alone
    (["--join", "sapo-swarm://join?relay=ws://127.0.0.1:1"], "invite link: the invite link is truncated"),
    (["--offline", "--join", "sapo-swarm://join?relay=ws://127.0.0.1:1"], "--join and --offline contradict"),
])
def test_a_bad_or_contradicted_invite_link_is_one_line_before_any_work(data, args, needle):
    proc = sapo("run", "--data-dir", data, *args)
    assert_one_line_error(proc, needle)
    assert proc.returncode == 2 and not Path(data).exists()


def test_an_events_file_that_cannot_be_written(data, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert_one_line_error(sapo("run", "--offline", "--data-dir", data, "--events", str(blocker / "events.jsonl")),
                          "cannot write events to", "a-file")


def test_models_lists_the_catalog_and_a_recommendation():
    proc = sapo("models")
    assert proc.returncode == 0, proc.stderr
    assert "smollm2-135m" in proc.stdout and "qwen2.5-0.5b" in proc.stdout
    assert "recommend" in proc.stdout.lower()
