"""The node's CPU priority: below the computer's other programs, as BOINC and Folding@home run their work.

``low`` (the default): nice 19 on Linux and macOS, IDLE_PRIORITY_CLASS on Windows. Linux keeps a nice value per
thread, so the threads already started are set one by one; threads started later (llama.cpp's and torch's
workers) and child processes (the scoring workers) inherit it. A nice value cannot be lowered again without
privileges, so the priority is chosen when the node starts. Measured beside two busy processes on 2 cores
(docs/BENCHMARKS.md, "A node beside other CPU work"): at normal priority the node takes half the machine from
them, at low they keep almost all of it and the node runs on what they leave.

The kernel shares the CPU between groups first and nice orders threads within a group. Linux puts each session in
an autogroup of its own (``sched_autogroup_enabled``), so a node that leads its own session (the app starts it so,
app/engine_process.py) also sets its autogroup's nice: measured with autogroups on, a node in its own session left
busy programs 47 % of their speed at nice 19 alone and 97 % with its autogroup at 19 too. A node that does not lead
its session (a headless run in a terminal) leaves the group alone: it holds the shell and whatever else runs there.
A desktop's per-app cgroups (systemd scopes with the cpu controller) share the CPU between apps likewise; the node
does not change its cgroup's weight. Hand-written: psutil sets the priority of a process's first thread only, not
of the ones it already runs, and knows nothing of autogroups.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil

LOW_NICE = 19


def apply_priority(priority: str) -> None:
    """Lower this process (every thread of it) to ``low``; ``normal`` leaves it as it was started."""
    if priority != "low":
        return
    if sys.platform == "win32":
        psutil.Process().nice(psutil.IDLE_PRIORITY_CLASS)
        return
    if os.getsid(0) == os.getpid():  # its own session: the autogroup holds this node and its children only
        try:
            Path("/proc/self/autogroup").write_text(str(LOW_NICE))
        except OSError:  # no autogroups in this kernel (the file is missing), or not allowed: nice still orders
            pass
    tasks = f"/proc/{os.getpid()}/task"
    threads = [int(t) for t in os.listdir(tasks)] if os.path.isdir(tasks) else [0]  # macOS: the whole process
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, LOW_NICE)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue
