"""The relay with its state in Redis, side by side with the embedded relay, under the same offered load.

Three cells, one after another in one run (the machine is shared: compare within a run):

    embedded      one relay, pool in memory, stats in SQLite (the default)
    redis x1      one relay, pool and stats in Redis
    redis x2      two replicas on one Redis; the load generator spreads its nodes over both

Each cell: ``python -m tools.relay_loadgen --url ...`` (open loop, same nodes, rate and duration), while this
script samples RSS and CPU of every relay process and of redis-server. Then Redis's memory per 10,000
pooled groups (INFO memory, used_memory, before and after, divided by the groups pooled).

    python benchmarks/bench_relay_redis.py [--nodes 200] [--rate 1000] [--seconds 15]

Needs redis-server on the PATH (Debian: redis-server). Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tools/ is the repository's, not an installed package

from tools.relay_loadgen import SpawnedRelay, free_port, spawn_relay  # noqa: E402

RELAY_ARGS = ["--rate", "100", "--burst", "200", "--groups-per-minute", "100000"]  # loadgen's defaults


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("bench_relay_redis: redis-server is not installed (Debian: apt install redis-server)")
    port = free_port()
    proc = subprocess.Popen([binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(workdir),
                             "--save", "", "--appendonly", "no", "--loglevel", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    for _ in range(100):
        try:
            client.ping()
            return proc, url
        except redis.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("bench_relay_redis: redis-server did not come up")


class Watch(threading.Thread):
    """Peak RSS and CPU seconds of some processes, sampled twice a second while the load runs."""

    def __init__(self, procs: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.procs = {name: psutil.Process(pid) for name, pid in procs.items()}
        self.peak = dict.fromkeys(procs, 0)
        self.cpu0 = {name: sum(p.cpu_times()[:2]) for name, p in self.procs.items()}
        self.cpu: dict[str, float] = {}
        self.started = time.monotonic()
        self.wall = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            for name, p in self.procs.items():
                self.peak[name] = max(self.peak[name], p.memory_info().rss)

    def stop(self) -> None:
        self.done.set()
        self.join()
        self.wall = time.monotonic() - self.started
        for name, p in self.procs.items():
            self.peak[name] = max(self.peak[name], p.memory_info().rss)
            self.cpu[name] = (sum(p.cpu_times()[:2]) - self.cpu0[name]) / self.wall


def load(urls: list[str], args: argparse.Namespace) -> dict[str, str]:
    cmd = [sys.executable, "-m", "tools.relay_loadgen", "--url", ",".join(urls), "--nodes", str(args.nodes),
           "--rate", str(args.rate), "--seconds", str(args.seconds)]
    # From the repository root, where `-m tools.relay_loadgen` is found.
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds + 300, cwd=ROOT).stdout
    found: dict[str, str] = {}
    if m := re.search(r"= (\d+) msg/s sustained", out):
        found["rps"] = m.group(1)
    if m := re.search(r"p50 ([\d.]+) ms\s+p90 [\d.]+ ms\s+p99 ([\d.]+) ms", out):
        found["p50"], found["p99"] = m.group(1), m.group(2)
    if m := re.search(r"errors: (.*), connect failures: (\d+)", out):
        found["errors"], found["connect_failures"] = m.group(1), m.group(2)
    if not found.get("rps"):
        print(out, file=sys.stderr)
    return found


def cell(name: str, relays: list[SpawnedRelay], redis_pid: int | None, args: argparse.Namespace) -> None:
    pids = {f"relay{i + 1}": r.proc.pid for i, r in enumerate(relays)}
    if redis_pid:
        pids["redis"] = redis_pid
    watch = Watch(pids)
    watch.start()
    got = load([r.url for r in relays], args)
    watch.stop()
    mem = "  ".join(f"{k} {watch.peak[k] / 2**20:.0f} MiB / {100 * watch.cpu[k]:.0f}% CPU" for k in pids)
    print(f"| {name} | {got.get('rps', '?')} | {got.get('p50', '?')} / {got.get('p99', '?')} ms | "
          f"{got.get('errors', '?')}, connect failures {got.get('connect_failures', '?')} | {mem} |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--rate", type=float, default=1000.0, help="requests/s offered, all nodes together")
    ap.add_argument("--seconds", type=float, default=15.0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sapo-bench-redis-"))
    rproc, rurl = start_redis(work)
    r = redis.Redis.from_url(rurl)
    print(f"{args.nodes} nodes, {args.rate:g} requests/s offered, {args.seconds:g} s per cell; machine: "
          f"{psutil.cpu_count()} cores, load average {psutil.getloadavg()[0]:.1f}")
    print("| cell | sustained requests/s | client p50 / p99 | errors | peak RSS / CPU per process |")
    print("|---|---|---|---|---|")
    note = ""
    try:
        for name, count in (("embedded", 0), ("redis x1", 1), ("redis x2", 2)):
            r.flushall()
            extra = ["--redis", rurl] if count else []
            relays = []
            for i in range(max(1, count)):
                (work / f"{name.replace(' ', '')}-{i}").mkdir()
                relays.append(spawn_relay(RELAY_ARGS + extra, work / f"{name.replace(' ', '')}-{i}"))
            try:
                before = r.info("memory")["used_memory"]
                cell(name, relays, rproc.pid if count else None, args)
                if count == 1:
                    after = r.info("memory")["used_memory"]
                    groups = int(r.get("sapo:groups") or 0)
                    per = (after - before) / groups * 10_000 / 2**20 if groups else float("nan")
                    note = (f"Redis after `redis x1`: {groups} groups pooled, used_memory {before / 2**20:.1f} -> "
                            f"{after / 2**20:.1f} MiB: {per:.1f} MiB per 10,000 groups (payload, bookkeeping, "
                            f"receivers remembered)")
            finally:
                for relay in relays:
                    relay.stop()
        print(f"\n{note}")
    finally:
        rproc.terminate()
        rproc.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
