"""Does sharing pay? N nodes training alone (I = budget, J = 0) against the same N nodes sharing
through one relay (I + J = budget), side by side, on the bundled model.

    python benchmarks/swarm_vs_alone.py [--nodes 2] [--rounds 15] [--local 2] [--external 2]

Both configurations use the same node ids (so the same question streams), the same settings and one
llama.cpp/torch thread per node; nodes of one configuration run at the same time. Reported, as in the
paper: the total reward of the nodes' own samples over all rounds, plus mean accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from relay_process import RelayProcess  # noqa: E402

from engine.sharing.keyfile import install  # noqa: E402
from wire.identity import Identity  # noqa: E402


def run_config(name: str, nodes: int, rounds: int, local: int, external: int, relay: RelayProcess | None,
               workdir: Path, extra: list[str]) -> list[list[dict]]:
    procs = []
    for i in range(nodes):
        data = workdir / f"{name}-{i}"
        data.mkdir(parents=True)
        install(data, Identity.from_seed(bytes([i + 1]) * 32))  # node i: the same id, so questions, in both runs
        events = workdir / f"{name}-{i}.jsonl"
        swarm = ["--relay", relay.url, "--swarm", name] if relay else ["--offline"]
        cmd = [sys.executable, "-m", "engine", "run", "--model", "smollm2-135m", "--rounds", str(rounds),
               "--local", str(local), "--external", str(external), "--eval-every", "0", "--threads", "1",
               "--quiet", "--data-dir", str(data), "--events", str(events), *swarm, *extra]
        procs.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), events))
    out = []
    for proc, events in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"{name}: a node failed: {err.decode()[-500:]}")
        out.append([json.loads(x) for x in events.read_text().splitlines() if '"type":"round"' in x])
    return out


def summary(name: str, runs: list[list[dict]], seconds: float) -> str:
    total = sum(e["reward_mean"] for r in runs for e in r)
    last = statistics.fmean(e["reward_mean"] for r in runs for e in r[-5:])
    acc = statistics.fmean(e["accuracy"] for r in runs for e in r)
    ext = sum(e.get("external_groups", 0) for r in runs for e in r)
    return (f"{name:<28} total reward {total:7.3f}  last-5-round mean {last:.3f}  mean accuracy {acc:.3f}  "
            f"external groups trained {ext:4d}  wall {seconds:5.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--local", type=int, default=2)
    ap.add_argument("--external", type=int, default=2)
    ap.add_argument("extra", nargs="*", help="more sapo-engine run flags, after --")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(tempfile.mkdtemp(prefix="sapo-swarm-bench-"))
    budget = args.local + args.external
    print(f"{args.nodes} nodes x {args.rounds} rounds, budget {budget} groups per round, bundled model, easy preset")
    t0 = time.perf_counter()
    alone = run_config("alone", args.nodes, args.rounds, budget, 0, None, work, args.extra)
    t1 = time.perf_counter()
    relay = RelayProcess(work / "relay").start()
    try:
        shared = run_config("swarm", args.nodes, args.rounds, args.local, args.external, relay, work, args.extra)
    finally:
        relay.stop()
    t2 = time.perf_counter()
    print(summary(f"alone   {budget}/0", alone, t1 - t0))
    print(summary(f"swarm   {args.local}/{args.external}", shared, t2 - t1))
    print("(total reward: sum over nodes and rounds of each round's mean reward of the node's own samples)")


if __name__ == "__main__":
    main()
