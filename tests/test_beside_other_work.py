"""A node beside other work: its CPU priority (engine/run/priority.py) on a real process (threads started before and
after it is set, and a child process, all at nice 19; ``normal`` changes nothing; a real node's threads:
tests/test_control.py), and OpenMP's short spin, set before torch or llama.cpp can read it (engine/__init__.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine import CPU_SPIN
from engine.run.priority import LOW_NICE
from tests.threads import autogroup_nice, thread_nices

ROOT = Path(__file__).resolve().parents[1]
LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# A process with a thread started before the priority is set, one after, and a child process; it waits on stdin.
CHILD = """
import subprocess, sys, threading
from engine.run.priority import apply_priority
hold = threading.Event()
threading.Thread(target=hold.wait, daemon=True).start()
apply_priority(sys.argv[1])
threading.Thread(target=hold.wait, daemon=True).start()
sleeper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
print("ready", flush=True)
sys.stdin.readline()
sleeper.stdin.close()
sleeper.wait()
"""


def _nices_of(priority: str, own_session: bool = False) -> tuple[dict[tuple[int, int], int], int | None]:
    """Every thread's nice value of the CHILD process and its child, and its autogroup's nice (None: no autogroups)."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, priority], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=ROOT, start_new_session=own_session)
    try:
        assert proc.stdout.readline().strip() == "ready"
        return thread_nices(proc.pid), autogroup_nice(proc.pid)
    finally:
        proc.communicate("\n", timeout=30)


@LINUX
def test_low_priority_reaches_every_thread_and_child():
    nices, group = _nices_of("low")
    assert len({pid for pid, _ in nices}) == 2 and len(nices) >= 4  # 3 threads here, 1 in the child
    assert set(nices.values()) == {LOW_NICE}
    # not the leader of its session: the session's autogroup (this test's) is left as it was
    assert group is None or group == autogroup_nice() != LOW_NICE


@LINUX
def test_a_process_leading_its_own_session_lowers_its_autogroup_too():
    nices, group = _nices_of("low", own_session=True)
    assert set(nices.values()) == {LOW_NICE}
    if group is None:
        pytest.skip("no autogroup to read here (/proc/PID/autogroup missing or empty)")
    assert group == LOW_NICE


@LINUX
def test_normal_priority_leaves_the_process_as_started():
    nices, group = _nices_of("normal", own_session=True)
    assert set(nices.values()) == {os.getpriority(os.PRIO_PROCESS, 0)} and group in (None, 0)



# What libgomp reads when torch or llama_cpp first loads it, as a node process imports its modules.
SPIN = """
import os, sys
seen = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in ("torch", "llama_cpp") and not seen:
            seen.append(os.environ.get("GOMP_SPINCOUNT"))
sys.meta_path.insert(0, Watch())
import engine.run.node, engine.sampling.llm
print(seen[0])
"""


@pytest.mark.parametrize("given, read", [(None, CPU_SPIN), ("50000", "50000")])
def test_openmp_spins_briefly_unless_the_user_says_otherwise(given, read):
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"} | ({"GOMP_SPINCOUNT": given} if given else {})
    out = subprocess.run([sys.executable, "-c", SPIN], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == read
