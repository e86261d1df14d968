"""``sapo-engine verify GROUP.json``: one JSON line, exit 0 accepted, 1 rejected, 2 bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import msgspec
import pytest

from engine.tasks.questions import QuestionStream, build_mix
from wire.protocol import Group

pytestmark = pytest.mark.slow  # the real model: started first when the suite runs on several workers

FLAGS = ["--model", "smollm2-135m", "--tasks", "basic_arithmetic", "--completions", "4", "--max-tokens", "24"]


def _verify(path, cache, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", "verify", *FLAGS, *flags, str(path)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "SAPO_CACHE_DIR": str(cache)})


def test_verify_prints_the_verdict_and_exits_by_it(tmp_path, model_cache):
    q = QuestionStream(build_mix("easy", tasks=["basic_arithmetic"]), "e" * 32, 0, []).draw(1)[0]
    group = Group(spec=q.spec, question=q.question, answer=q.answer, model="peer",
                  completions=[f"<answer>{q.answer}</answer>", "<answer>999</answer>", "no tag", "x " * 200],
                  rewards=[1.1, 0.1, 0.0, 0.0])
    good = tmp_path / "good.json"
    good.write_bytes(msgspec.json.encode(group))
    proc = _verify(good, model_cache)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = proc.stdout.strip().splitlines()
    out = json.loads(line)
    assert out["verdict"] == "accepted" and out["reason"] is None
    assert out["rewards"] == [1.1, 0.1, 0.0, 0.0] and out["cut_to_max_tokens"] == 1 and out["verify_s"] >= 0

    liar = tmp_path / "liar.json"
    liar.write_bytes(msgspec.json.encode(msgspec.structs.replace(group, rewards=[1.1, 1.1, 0.0, 0.0])))
    proc = _verify(liar, model_cache)
    assert proc.returncode == 1 and json.loads(proc.stdout)["reason"] == "reward_mismatch"

    bad = tmp_path / "bad.json"
    bad.write_text('{"spec": 1}')
    proc = _verify(bad, model_cache)
    assert proc.returncode == 2 and proc.stdout == "" and "not a valid group" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
