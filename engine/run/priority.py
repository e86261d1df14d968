"""The node's CPU priority: below the computer's other programs, as BOINC and Folding@home run their work.

``low`` (the default): nice 19 on Linux and macOS, IDLE_PRIORITY_CLASS on Windows. Linux keeps a nice value per
thread, so the threads already started are set one by one; threads started later (llama.cpp's and torch's
workers) and child processes (the scoring workers) inherit it. A nice value cannot be lowered again without
privileges, so the priority is chosen when the node starts. Measured beside two busy processes on 2 cores
(docs/BENCHMARKS.md, "A node beside other CPU work"): at normal priority the node takes half the machine from
them, at low they keep almost all of it and the node runs on what they leave.

The kernel shares the CPU between groups first (Linux autogroups, a desktop's per-app cgroups) and nice orders
threads within a group, so where the node runs in a group of its own, it gets that group's share whatever its nice.
Hand-written: psutil sets the priority of a process's first thread only, not of the ones it already runs.
"""

from __future__ import annotations

import os
import sys

import psutil

LOW_NICE = 19


def apply_priority(priority: str) -> None:
    """Lower this process (every thread of it) to ``low``; ``normal`` leaves it as it was started."""
    if priority != "low":
        return
    if sys.platform == "win32":
        psutil.Process().nice(psutil.IDLE_PRIORITY_CLASS)
        return
    tasks = f"/proc/{os.getpid()}/task"
    threads = [int(t) for t in os.listdir(tasks)] if os.path.isdir(tasks) else [0]  # macOS: the whole process
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, LOW_NICE)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue
