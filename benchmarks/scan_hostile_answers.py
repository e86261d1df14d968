"""Every reasoning-gym dataset's scorer, through the node's safe scoring, against hand-made hostile answers.

Looks for work the per-answer CPU timer cannot stop (it interrupts Python, not C code): each dataset runs in
a child process of its own, the answers one after another with ``cpu_s`` of CPU each; a child still busy with
one answer after ``--wall`` seconds is killed and its dataset reported, with the answer it was on. Prints one line per
dataset that was slow or killed, then a summary. Exit status 1 when any dataset was killed.

    python benchmarks/scan_hostile_answers.py [--wall 20] [--cpu 2] [--datasets a,b]

2026-12-02 (before the fix in safe_scoring._plain_number): polynomial_multiplication, simple_integration and
intermediate_integration were killed on ``1e999999999`` (sympy made the Float rational in C).
"""

from __future__ import annotations

import argparse
import json
import selectors
import subprocess
import sys
import time

HOSTILE = [
    "1e999999999", "1E+999999999", "-0.1e999999999", "1e-999999999", "9.99e99999999", "1_0e9_99999999",
    "x*1e9999", "9**9**9**9", "(9**64)**64**64", "E**E**E**99", "10**10**10", "[" * 500 + "]" * 500,
    "(" * 500 + "1" + ")" * 500, "-" * 3000 + "1", "9" * 4000, "A+999999999999 " * 200, "R999999999999",
    "1/" * 1000 + "1", "a" * 4096, "\u00e9" * 2000, "\x00" * 100, "nan", "inf", "-inf",
]
SLOW_S = 1.0  # an answer over this many seconds of wall time is reported


def child(dataset: str, cpu_s: float) -> None:
    """One dataset: a line of JSON per answer (index, seconds, score or error) as it goes."""
    import reasoning_gym

    from engine.sandbox.safe_scoring import score_answer

    ds = reasoning_gym.create_dataset(dataset, size=1, seed=1)
    entry = ds[0]
    for i, answer in enumerate(HOSTILE):
        print(json.dumps({"i": i, "started": True}), flush=True)
        t0 = time.monotonic()
        try:
            result: object = score_answer(dataset, ds, answer, entry, cpu_s=cpu_s)
        except Exception as exc:  # noqa: BLE001 - a raising scorer is a 0 in the sandbox; here it is information
            result = f"raised {type(exc).__name__}"
        print(json.dumps({"i": i, "s": round(time.monotonic() - t0, 3), "result": str(result)}), flush=True)


def scan(dataset: str, wall: float, cpu_s: float, setup_s: float = 300.0) -> tuple[str, list[dict], int | None]:
    """('ok' | 'killed' | 'failed', the answers' lines, the answer it was on when killed). Each answer gets
    ``wall`` seconds from its start; making the dataset, before the first, gets ``setup_s``."""
    proc = subprocess.Popen([sys.executable, __file__, "--child", dataset, "--cpu", str(cpu_s)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    lines: list[dict] = []
    busy: int | None = None
    deadline = time.monotonic() + setup_s
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                proc.kill()
                proc.wait()
                return "killed", [x for x in lines if "s" in x], busy
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("{"):
                x = json.loads(line)
                lines.append(x)
                if x.get("started"):
                    busy, deadline = x["i"], time.monotonic() + wall
    return ("ok" if proc.wait() == 0 else "failed"), [x for x in lines if "s" in x], None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wall", type=float, default=20.0, help="seconds one answer's scoring may take")
    ap.add_argument("--cpu", type=float, default=2.0, help="CPU seconds per answer (the node's default is lower)")
    ap.add_argument("--datasets", help="comma-separated datasets (default: all)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.cpu)
        return 0
    import reasoning_gym.factory

    names = args.datasets.split(",") if args.datasets else sorted(reasoning_gym.factory.DATASETS)
    killed, t0 = [], time.monotonic()
    for name in names:
        status, done, busy = scan(name, args.wall, args.cpu)
        slow = [x for x in done if x["s"] > SLOW_S]
        if status == "killed":
            killed.append(name)
            print(f"{name}: KILLED after {args.wall:.0f} s on answer {HOSTILE[busy][:40]!r}" if busy is not None
                  else f"{name}: KILLED: the dataset was not made in time", flush=True)
        elif status == "failed":
            print(f"{name}: the child failed (dataset not made?)", flush=True)
        for x in slow:
            print(f"{name}: {x['s']:.2f} s on {HOSTILE[x['i']][:40]!r} -> {x['result']}", flush=True)
    print(f"{len(names)} datasets x {len(HOSTILE)} answers in {time.monotonic() - t0:.0f} s; "
          f"killed: {', '.join(killed) or 'none'}")
    return 1 if killed else 0


if __name__ == "__main__":
    sys.exit(main())
