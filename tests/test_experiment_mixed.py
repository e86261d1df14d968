"""A mixed experiment (issue 21, the paper's own setting): SmolLM2 and Gemma 3 agents in one run, each
model on its own backbone, each agent paired with itself alone, the report broken down per model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.lab.experiment import read_records

pytestmark = pytest.mark.slow


@pytest.mark.timeout(2400)
def test_two_models_in_one_experiment(tmp_path: Path, model_cache: Path, gemma_gguf: Path):
    out = tmp_path / "run"
    env = {**os.environ, "SAPO_CACHE_DIR": str(model_cache), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "engine", "experiment", "--out", str(out), "--configs", "alone,swarm",
           "--models", f"smollm2-135m,{gemma_gguf}", "--agents", "2", "--rounds", "2", "--local", "2",
           "--external", "2", "--completions", "4", "--max-tokens", "24", "--tasks", "basic_arithmetic,chain_sum",
           "--fewshot", "1", "--eval-per-task", "1", "--threads", "1", "--workers", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=2400, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    gemma = gemma_gguf.stem.lower()
    for config in ("alone", "swarm"):
        rows = read_records(out / config / "seed-0" / "records.jsonl")
        assert {(r["agent"], r["model"]) for r in rows} == {(0, "smollm2-135m"), (1, gemma)}
        final = json.loads((out / config / "seed-0" / "done.json").read_text())
        assert {k: e["model"] for k, e in final["eval"].items()} == {"0": "smollm2-135m", "1": gemma}
        meta = json.loads((out / config / "seed-0" / "meta.json").read_text())
        assert meta["models"] == ["smollm2-135m", gemma]
    swarm = read_records(out / "swarm" / "seed-0" / "records.jsonl")
    # Gemma (agent 1) trains on SmolLM2's groups, re-encoded with its own tokenizer: 262k ids would not
    # even index SmolLM2's embedding, so training on them without an error means they were re-encoded.
    assert sum(r["external_groups"] for r in swarm if r["agent"] == 1) >= 1
    rep = subprocess.run([sys.executable, "-m", "engine", "experiment", "report", str(out)], capture_output=True,
                         text=True, timeout=300, env=env)
    assert rep.returncode == 0, rep.stderr[-2000:]
    assert "### agents running smollm2-135m" in rep.stdout and f"### agents running {gemma}" in rep.stdout


def test_an_unknown_model_is_one_line_and_exit_2(tmp_path: Path):
    cmd = [sys.executable, "-m", "engine", "experiment", "--out", str(tmp_path / "run"), "--models",
           f"smollm2-135m,{tmp_path / 'missing.gguf'}", "--rounds", "1", "--agents", "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1 and "missing.gguf" in done.stderr
