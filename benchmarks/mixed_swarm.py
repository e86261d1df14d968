"""Does a mixed pair learn faster? A SmolLM2 node and a Gemma 3 node, each alone and then sharing.

    python benchmarks/mixed_swarm.py [--rounds 10] [--local 2] [--external 2] [--gemma PATH] [-- run flags]

Configurations, each one's two nodes running at the same time, one thread each:
  alone:  SmolLM2 offline and Gemma offline, budget I + J local groups each;
  mixed:  SmolLM2 and Gemma on one relay (127.0.0.1), I local + J external each.
The same node ids (so the same question streams) in both. Reported per model, as in the paper: the
total reward of the node's own samples over all rounds, the last rounds' mean, mean accuracy, and
how many external groups it trained on. Gemma is the test fixture (scripts/test-fixtures.sh).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from relay_process import RelayProcess  # noqa: E402

from engine.sharing.keyfile import install  # noqa: E402
from wire.identity import Identity  # noqa: E402

KEYS = {"smollm2": b"\x05" * 32, "gemma": b"\x06" * 32}  # fixed keys: the same node ids in every run


def fixture() -> str:
    out = subprocess.run(["bash", str(ROOT / "scripts" / "test-fixtures.sh")], check=True, capture_output=True,
                         text=True, env={**os.environ, "PYTHON": sys.executable})
    return out.stdout.strip().splitlines()[-1]


def run_pair(name: str, models: dict[str, str], rounds: int, local: int, external: int, relay: RelayProcess | None,
             workdir: Path, extra: list[str]) -> dict[str, list[dict]]:
    procs = {}
    for who, model in models.items():
        data = workdir / f"{name}-{who}"
        data.mkdir(parents=True)
        install(data, Identity.from_seed(KEYS[who]))
        events = workdir / f"{name}-{who}.jsonl"
        swarm = ["--relay", relay.url, "--swarm", name] if relay else ["--offline"]
        cmd = [sys.executable, "-m", "engine", "run", "--model", model, "--rounds", str(rounds), "--local", str(local),
               "--external", str(external), "--eval-every", "0", "--threads", "1", "--quiet", "--data-dir", str(data),
               "--events", str(events), *swarm, *extra]
        procs[who] = (subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), events)
    out = {}
    for who, (proc, events) in procs.items():
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"{name}/{who}: the node failed: {err.decode()[-500:]}")
        out[who] = [json.loads(x) for x in events.read_text().splitlines() if '"type":"round"' in x]
    return out


def line(config: str, who: str, rounds: list[dict]) -> str:
    total = sum(e["reward_mean"] for e in rounds)
    last = statistics.fmean(e["reward_mean"] for e in rounds[-5:])
    acc = statistics.fmean(e["accuracy"] for e in rounds)
    ext = sum(e.get("external_groups", 0) for e in rounds)
    rej = sum(e.get("rejected_groups", 0) for e in rounds)
    return (f"{config:<8} {who:<8} total reward {total:6.3f}  last-5 mean {last:.3f}  mean accuracy {acc:.3f}  "
            f"external groups trained {ext:3d}  rejected {rej}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--local", type=int, default=2)
    ap.add_argument("--external", type=int, default=2)
    ap.add_argument("--gemma", help="Gemma 3 GGUF (default: the test fixture)")
    ap.add_argument("extra", nargs="*", help="more sapo-engine run flags, after --")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    models = {"smollm2": "smollm2-135m", "gemma": args.gemma or fixture()}
    work = Path(tempfile.mkdtemp(prefix="sapo-swarm-mixed-"))
    budget = args.local + args.external
    print(f"SmolLM2-135M + Gemma-3-270M, {args.rounds} rounds, budget {budget} groups per round, easy preset defaults")
    t0 = time.perf_counter()
    alone = run_pair("alone", models, args.rounds, budget, 0, None, work, args.extra)
    t1 = time.perf_counter()
    relay = RelayProcess(work / "relay").start()
    try:
        mixed = run_pair("mixed", models, args.rounds, args.local, args.external, relay, work, args.extra)
    finally:
        relay.stop()
    t2 = time.perf_counter()
    for who in models:
        print(line(f"alone {budget}/0", who, alone[who]))
        print(line(f"mixed {args.local}/{args.external}", who, mixed[who]))
    print(f"wall: alone {t1 - t0:.0f} s, mixed {t2 - t1:.0f} s; events in {work}")


if __name__ == "__main__":
    main()
