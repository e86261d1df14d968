"""A model's first load into torch (the wizard's speed test and a first start wait for it): transformers' own GGUF
loading against the node's (engine/learning/policy.py, ``_gguf_parsed_once``), side by side in one run.

Both dequantize the same working copy with no safetensors cache; they take turns, ``--repeats`` times each, and
the fastest of each is reported with the ratio. Then the cached load (what every later start does).

    python benchmarks/bench_first_load.py [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
import warnings
from pathlib import Path

import torch

from engine.learning.policy import load_base
from engine.models.modelfile import bundled_model_path
from engine.models.working_copy import working_gguf
from engine.paths import default_cache_dir


def plain(path: Path) -> None:
    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32,
                                             attn_implementation="sdpa")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    path = working_gguf(bundled_model_path(), "auto", default_cache_dir() / "models")
    times: dict[str, list[float]] = {"transformers": [], "node": []}
    for _ in range(args.repeats):
        for name in times:
            t0 = time.perf_counter()
            plain(path) if name == "transformers" else load_base(path, None)
            times[name].append(time.perf_counter() - t0)
    with tempfile.TemporaryDirectory() as cache:
        load_base(path, Path(cache))
        t0 = time.perf_counter()
        load_base(path, Path(cache))
        cached = time.perf_counter() - t0
    best = {k: min(v) for k, v in times.items()}
    print(f"machine: {platform.processor() or platform.machine()}, {args.threads} threads; model {path.name}")
    for k, v in times.items():
        print(f"{k:>12}: fastest {best[k]:.1f} s of {', '.join(f'{x:.1f}' for x in v)}")
    print(f"     speedup: {best['transformers'] / best['node']:.2f}x; a later start (cached): {cached:.1f} s")


if __name__ == "__main__":
    main()
