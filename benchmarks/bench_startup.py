"""What an engine start spends reading its model file's metadata: this checkout against an older one, side by side.

    python benchmarks/bench_startup.py --old /tmp/sapo-d9a16b6 [--pairs 3] [--engine-pairs 1]

Metadata: in a fresh process each, the calls a start makes about the bundled model (`inspect_gguf` and the
working copy's `source_ftype`) with
  old:   the older checkout (gguf's reader parses the whole header each time, the tokenizer arrays included)
  cold:  this checkout with an empty cache dir (one parse, then kept in `gguf-info/`)
  warm:  this checkout with that entry present (what every later start costs)
Engine: a whole one-round `sapo-engine run` (small settings) of each checkout, warm caches, alternating, wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import time
try:  # before engine/ was grouped by the stages of a round (d9a16b6 and older); first, because the
    # editable install's finder would find this checkout's engine.models for an old tree that lacks it
    from engine.modelfile import bundled_model_path, inspect_gguf
    from engine.weights import source_ftype
except ImportError:  # this checkout's layout
    from engine.models.modelfile import bundled_model_path, inspect_gguf
    from engine.models.working_copy import source_ftype
p = bundled_model_path()
t = time.perf_counter()
inspect_gguf(p)
source_ftype(p)
print(time.perf_counter() - t)
"""
SMALL = ["--model", "smollm2-135m", "--offline", "--tasks", "basic_arithmetic", "--local", "2", "--external", "0",
         "--completions", "4", "--max-tokens", "24", "--eval-every", "0", "--threads", "1", "--quiet", "--rounds", "1"]


def env(tree: Path, cache: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), "SAPO_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1",
            "PYTHONHASHSEED": "0"}


def metadata_s(tree: Path, cache: Path) -> float:
    out = subprocess.run([sys.executable, "-c", PROBE], env=env(tree, cache), cwd=tree, capture_output=True,
                         text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def engine_s(tree: Path, cache: Path, work: Path) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "engine", "run", *SMALL, "--data-dir", str(work)], env=env(tree, cache),
                   cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, required=True, help="an older checkout, e.g. `git worktree add /tmp/old d9a16b6`")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--engine-pairs", type=int, default=1)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"old": [], "cold": [], "warm": [], "engine old": [], "engine new": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        for i in range(args.pairs):
            cache = tmp_path / f"cache-{i}"
            times["old"].append(metadata_s(args.old, tmp_path / "old-cache"))
            times["cold"].append(metadata_s(ROOT, cache))
            times["warm"].append(metadata_s(ROOT, cache))
        shared = tmp_path / "engine-cache"  # working copies made once, by a first run of each checkout
        for tree in (args.old, ROOT):
            engine_s(tree, shared, tmp_path / f"warmup-{tree.name}")
        for i in range(args.engine_pairs):
            order = [("engine old", args.old), ("engine new", ROOT)]
            for name, tree in order if i % 2 == 0 else order[::-1]:
                times[name].append(engine_s(tree, shared, tmp_path / f"{name.replace(' ', '-')}-{i}"))
    print("| what | runs | median s |\n|---|---|---|")
    for name, values in times.items():
        if values:
            print(f"| {name} | {len(values)} | {statistics.median(values):.2f} |")
    old, warm = statistics.median(times["old"]), statistics.median(times["warm"])
    print(f"\nmetadata: old {old:.2f} s -> warm {warm:.2f} s a start ({old - warm:.1f} s saved)")
    if times["engine old"] and times["engine new"]:
        eo, en = statistics.median(times["engine old"]), statistics.median(times["engine new"])
        print(f"one-round engine run: old {eo:.1f} s, new {en:.1f} s ({eo - en:+.1f} s)")


if __name__ == "__main__":
    main()
