"""A model's first load into torch (the wizard's speed test and a first start wait for it): transformers' own GGUF
loading against the node's (engine/learning/policy.py, ``_gguf_parsed_once``), side by side in one run.

Both dequantize the same working copy with no safetensors cache; they take turns, ``--repeats`` times each, and
the fastest of each is reported with the ratio. Then the cached load (what every later start does): the cache's
size on disk, and its load against the same weights cached all in fp32 (the format before the cache kept bf16
where exact), taking turns.

    python benchmarks/bench_first_load.py [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

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
    cached: dict[str, list[float]] = {"fp32": [], "exact": []}
    size: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        caches = {name: Path(tmp) / name for name in cached}
        load_base(path, caches["exact"])
        (written,) = caches["exact"].glob("*/model.safetensors")
        old = caches["fp32"] / written.parent.name
        shutil.copytree(written.parent, old)
        save_file({k: t.float() for k, t in load_file(written).items()}, str(old / written.name), {"format": "pt"})
        size = {name: (c / written.parent.name / written.name).stat().st_size for name, c in caches.items()}
        for _ in range(args.repeats):
            for name, c in caches.items():
                t0 = time.perf_counter()
                load_base(path, c)
                cached[name].append(time.perf_counter() - t0)
    best = {k: min(v) for k, v in times.items()}
    print(f"machine: {platform.processor() or platform.machine()}, {args.threads} threads; model {path.name}")
    for k, v in times.items():
        print(f"{k:>12}: fastest {best[k]:.1f} s of {', '.join(f'{x:.1f}' for x in v)}")
    print(f"     speedup: {best['transformers'] / best['node']:.2f}x")
    for k, v in cached.items():
        print(f"cached, {k:>5}: {size[k] / 1e6:.0f} MB, load fastest {min(v):.2f} s of {', '.join(f'{x:.2f}' for x in v)}")


if __name__ == "__main__":
    main()
