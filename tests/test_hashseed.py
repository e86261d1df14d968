"""Question texts must not depend on the process: reasoning-gym's polynomial_multiplication words a
question by Python's string hashing, so nodes (and a node's scoring workers) run with one hash seed."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

QUESTION = """
import json
from engine.tasks.questions import regenerate
from wire.protocol import TaskSpec
print(json.dumps([regenerate(TaskSpec("polynomial_multiplication", {}, 7, i)).question for i in range(6)]))
"""


def _questions(env: dict[str, str]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", QUESTION], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=300, check=True)
    return json.loads(out.stdout)


def _env(seed: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env | ({"PYTHONHASHSEED": seed} if seed is not None else {})


def test_the_question_text_follows_the_hash_seed_and_the_fixed_seed_makes_it_one_text():
    # Why the fix exists: under two different seeds the same specs are worded differently...
    assert _questions(_env("1")) != _questions(_env("2"))
    # ...and under the engine's seed, every process words them alike.
    assert _questions(_env("0")) == _questions(_env("0"))


def test_the_engine_command_restarts_itself_with_the_fixed_seed():
    probe = "import os, sys; from engine.commands.cli import main; sys.argv = ['sapo-engine', '--help']; " \
            "print('seed', os.environ.get('PYTHONHASHSEED'), flush=True); main()"
    out = subprocess.run([sys.executable, "-c", probe], env=_env("5"), cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    lines = out.stdout.splitlines()
    assert lines[0] == "seed 5"  # the first process, before the restart
    assert out.returncode == 0 and "usage" in out.stdout  # the restarted one (python -m engine --help) ran the command


def test_scoring_workers_get_the_fixed_seed():
    from engine.tasks import hashseed

    assert hashseed.env({"PATH": "/bin", "PYTHONHASHSEED": "random"})["PYTHONHASHSEED"] == "0"
