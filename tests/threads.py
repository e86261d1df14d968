"""CPU threads for a test's engine or model: the machine's cores shared among pytest-xdist's workers; and the
priority a process's threads run at.

Engines that together ask for more threads than there are cores lose several-fold, not the share they asked for
(docs/BENCHMARKS.md, "A node beside other CPU work"), and `make test` runs two workers on CI's two cores.
"""

import os
from pathlib import Path

import psutil

WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, (psutil.cpu_count(logical=False) or 1) // WORKERS)


def autogroup_nice(pid: int | str = "self") -> int | None:
    """The nice value of a process's autogroup, or None where there is none to read: a kernel without autogroups has
    no file, and the root autogroup (a session no process has left with setsid since boot: CI's, and PID 1's here)
    reads as empty."""
    try:
        fields = Path(f"/proc/{pid}/autogroup").read_text().split()  # "/autogroup-407 nice 0"
    except OSError:
        return None
    return int(fields[-1]) if len(fields) == 3 and fields[1] == "nice" else None


def thread_nices(pid: int) -> dict[tuple[int, int], int]:
    """The nice value of every thread of a process and of its child processes, by (process, thread) id (Linux)."""
    out = {}
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        for task in Path(f"/proc/{proc.pid}/task").iterdir():
            try:
                stat = (task / "stat").read_text()
            except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
                continue
            out[(proc.pid, int(task.name))] = int(stat.rsplit(")", 1)[1].split()[16])  # field 19: nice
    return out
