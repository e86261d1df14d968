"""A node beside other CPU work: wall time of a real engine run, and how much CPU the other work keeps.

Volunteers' computers are busy with other things, and CI runs two pytest workers, each starting engines. Both
llama.cpp's and torch's worker threads are GNU OpenMP threads, which by default spin ~300,000 times at every
barrier before they sleep; with more threads than free cores the spinning thread burns the time slice of the one
it waits for. This runs `sapo-engine run` (bundled model, offline, 2 small rounds) in three situations, under
libgomp's default spin and the engine's (``engine.CPU_SPIN``, set unless the user set ``GOMP_SPINCOUNT``), at
normal and at low priority (``--priority``, engine/run/priority.py):

- alone on the machine;
- beside "the user's work": one busy pure-Python process per core for the engine's first 20 s (``--work-seconds``;
  its iterations a second then, against the same processes alone, is the share of the machine the user keeps);
- two engines at once, as CI's two workers start them.

    .venv/bin/python benchmarks/bench_contention.py [--threads 2] [--rounds 2] [--cases 300000:normal,1000:low]
        [--own-session]   # with autogroups on (as root: echo 1 > /proc/sys/kernel/sched_autogroup_enabled)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import CPU_SPIN  # noqa: E402  (its GOMP_SPINCOUNT is not this process's concern: each engine gets its own)

LIBGOMP_DEFAULT = 300_000  # libgomp's spin count when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set


def busy(stop: mp.Event, seconds: float, out: mp.Queue) -> None:
    """The user's work: count for ``seconds`` or until told to stop, then report iterations a second."""
    n, start = 0, time.monotonic()
    while not stop.is_set() and time.monotonic() - start < seconds:
        for _ in range(100_000):
            n += 1
    out.put(n / (time.monotonic() - start))


def user_work(cores: int, seconds: float, during) -> tuple[float, object]:
    """Iterations a second of ``cores`` busy processes over ``seconds`` (or until ``during()`` returns, if sooner),
    and what ``during()`` returned."""
    stop, out = mp.Event(), mp.Queue()
    procs = [mp.Process(target=busy, args=(stop, seconds, out)) for _ in range(cores)]
    for p in procs:
        p.start()
    try:
        result = during()
    finally:
        stop.set()
    rates = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(rates), result


def start_engine(spin: int, priority: str, threads: int, rounds: int, data_dir: str,
                 own_session: bool = False) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "engine", "run", "--model", "smollm2-135m", "--offline", "--tasks", "basic_arithmetic",
           "--local", "4", "--external", "0", "--completions", "4", "--max-tokens", "24", "--eval-every", "0",
           "--quiet", "--rounds", str(rounds), "--threads", str(threads), "--priority", priority, "--data-dir", data_dir]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GOMP_SPINCOUNT": str(spin)}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=own_session)


def engines(n: int, spin: int, priority: str, threads: int, rounds: int, own_session: bool = False) -> list[float]:
    """Wall seconds of each of ``n`` engines started at once (model loading included)."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        procs = [start_engine(spin, priority, threads, rounds, f"{tmp}/{i}", own_session) for i in range(n)]
        walls = []
        for p in procs:
            _, err = p.communicate()
            if p.returncode != 0:
                raise SystemExit(f"bench_contention: an engine failed (exit {p.returncode}): {err.strip()[-300:]}")
            walls.append(time.monotonic() - t0)
        return walls


def autogroups() -> bool:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--own-session", action="store_true",
                    help="start each engine in a session of its own, as the app does (with Linux's autogroups on, "
                         "its own scheduling group)")
    ap.add_argument("--work-seconds", type=float, default=20.0, help="how long the user's work runs beside the engine")
    ap.add_argument("--cases", default=f"{LIBGOMP_DEFAULT}:normal,{CPU_SPIN}:normal,{CPU_SPIN}:low",
                    help="GOMP_SPINCOUNT:priority pairs to compare (the engine's defaults: %(default)s's last)")
    args = ap.parse_args()
    cases = [(int(spin), priority) for spin, priority in (c.split(":") for c in args.cases.split(","))]
    cores = os.cpu_count() or 1
    alone_rate, _ = user_work(cores, args.work_seconds, lambda: time.sleep(args.work_seconds))
    print(f"# {cores} CPUs; the user's work alone: {alone_rate / 1e6:.1f} M iterations/s; engine --threads "
          f"{args.threads}, {args.rounds} rounds, wall time from start to exit (model load included); the user's work "
          f"beside it for its first {args.work_seconds:g} s; engines in {'their own' if args.own_session else 'this'} "
          f"session; autogroups {'on' if autogroups() else 'off'}", flush=True)
    print("| GOMP_SPINCOUNT | priority | one engine alone | one engine beside the user's work (work kept) | "
          "two engines at once |")
    print("|---|---|---|---|---|")
    for spin, priority in cases:
        alone = engines(1, spin, priority, args.threads, args.rounds, args.own_session)[0]
        rate, beside = user_work(cores, args.work_seconds,
                                 lambda: engines(1, spin, priority, args.threads, args.rounds, args.own_session)[0])
        two = engines(2, spin, priority, args.threads, args.rounds, args.own_session)
        print(f"| {spin} | {priority} | {alone:.1f} s | {beside:.1f} s ({rate / alone_rate:.0%}) | "
              f"{two[0]:.1f} s, {two[1]:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
