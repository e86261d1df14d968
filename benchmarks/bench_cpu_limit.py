"""The CPU-time limit on a real engine: CPU time / (threads x wall time) over a short run's rounds.

Runs ``sapo-engine run`` on the bundled model (offline, small rounds) once per limit, meters the engine's
process tree (the engine and its scoring workers) with psutil from its ``start`` event to its ``stop``
event (model loading left out), and prints the share of its threads' time it used, beside the limit.
On a busy machine a run gets less CPU than it asks for, so the unthrottled share is printed too.

    .venv/bin/python benchmarks/bench_cpu_limit.py [--limits 100,50] [--rounds 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def tree_cpu(proc: psutil.Process) -> float:
    total = sum(proc.cpu_times()[:2])
    for child in proc.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            continue
    return total


def one_run(limit: int, rounds: int, threads: int, data_dir: Path) -> dict[str, float]:
    cmd = [sys.executable, "-m", "engine", "run", "--model", "smollm2-135m", "--offline", "--rounds", str(rounds),
           "--local", "2", "--external", "0", "--completions", "4", "--max-tokens", "48", "--eval-every", "0",
           "--threads", str(threads), "--cpu-limit", str(limit), "--data-dir", str(data_dir), "--events", "-",
           "--quiet"]
    child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"})
    meter = psutil.Process(child.pid)
    start: tuple[float, float] | None = None
    end: tuple[float, float] | None = None
    assert child.stdout is not None
    for line in child.stdout:
        kind = json.loads(line).get("type")
        if kind == "start":
            start = (time.monotonic(), tree_cpu(meter))
        elif kind == "stop":
            end = (time.monotonic(), tree_cpu(meter))
    if child.wait() != 0 or start is None or end is None:
        raise SystemExit(f"bench_cpu_limit: the engine run at {limit} % failed (exit {child.returncode})")
    wall, cpu = end[0] - start[0], end[1] - start[1]
    return {"limit": limit, "wall_s": wall, "cpu_s": cpu, "share": cpu / (threads * wall)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limits", default="100,50", help="comma-separated percents")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    print(f"{'limit':>6} {'wall s':>8} {'CPU s':>8} {'CPU / (threads x wall)':>24}")
    for limit in (int(x) for x in args.limits.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            r = one_run(limit, args.rounds, args.threads, Path(tmp))
        print(f"{limit:>5}% {r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} {100 * r['share']:>23.0f}%", flush=True)


if __name__ == "__main__":
    main()
