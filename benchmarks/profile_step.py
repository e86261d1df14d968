"""Where one experiment agent-round's training step spends its time: torch's profiler over real groups.

    python benchmarks/profile_step.py [--groups 4] [--completions 4] [--max-tokens 48] [--threads 1] [--micro-batch 8]

The work of an experiment round of docs/RESULTS.md (I = J = 2: 4 groups of L = 4, <= 48 tokens, the second half
from "peers", whose below-average answers are skipped as under ``drop``), the bundled model, the engine's
automatic dtype, one thread as experiment workers run. Groups are sampled by llama.cpp (``bench_train.make_groups``);
one warm-up step, ``--steps`` timed steps, then one step under the profiler. Printed: the step times, the profiled
step's self time by kind of operation (matrix products, attention, the rest), and the matrix products' rate by
row count (the number of token rows in one product), which shows what small micro-batches cost.
For issue 22: which part of a step a change would have to shrink.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KINDS = {"matmul": ("aten::mm", "aten::addmm", "aten::bmm"), "attention": ("aten::_scaled_dot_product",)}
ROWS = ((1, 16), (17, 48), (49, 96), (97, 10**9))  # row-count buckets of the matrix products


def kind(name: str) -> str:
    for k, prefixes in KINDS.items():
        if name.startswith(prefixes):
            return k
    return "other (elementwise, copies, autograd)"


def experiment_step(cache: Path, groups: int = 4, completions: int = 4, max_tokens: int = 48, threads: int = 1,
                    micro_batch: int = 8) -> tuple[Any, list[Any], Any]:
    """(trainer, groups, dtype) for one experiment round's update: real groups sampled by llama.cpp, the second
    half as peers' (``drop``), the bundled model with the run's LoRA, the engine's automatic dtype."""
    import bench_train
    import torch

    from engine.learning.policy import attach_lora, load_base, lora_config
    from engine.learning.trainer import TrainConfig, Trainer
    from engine.models.accel import choose_device, choose_dtype, memory_budget
    from engine.models.hardware import tune_allocator
    from engine.tasks.groups import TrainGroup

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "groups.json"
        bench_train.make_groups("easy", groups, completions, cache, threads, path)
        raw = json.loads(path.read_text())
    half = len(raw) // 2
    made = [TrainGroup(g["prompt"], [c[:max_tokens] for c in g["completions"]], g["advantages"],
                       external=k >= half) for k, g in enumerate(raw)]
    tune_allocator()
    torch.set_num_threads(threads)
    device = choose_device("cpu")
    dtype = choose_dtype("auto", device)
    torch.manual_seed(0)
    model = attach_lora(load_base(bench_train._model_path(cache), cache / "torch", dtype=dtype, device=device),
                        lora_config(16, 32, 0.0, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                  "down_proj"]))
    trainer = Trainer(model, TrainConfig(micro_batch=micro_batch, external_negatives="drop",
                                         memory_budget=memory_budget(None, device)))
    return trainer, made, dtype


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--completions", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--micro-batch", type=int, default=8, help="completions per micro-batch (the tiny model's default)")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("SAPO_CACHE_DIR") or
                                                      Path(tempfile.gettempdir()) / "sapo-bench-cache"))
    args = ap.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    trainer, groups, dtype = experiment_step(args.cache, args.groups, args.completions, args.max_tokens,
                                             args.threads, args.micro_batch)
    trainer.step(groups[:1])  # first-call costs
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        stats = trainer.step(groups)
        times.append(time.perf_counter() - t0)
    print(f"{len(groups)} groups x {args.completions}, dtype {str(dtype).removeprefix('torch.')}, {args.threads} "
          f"thread(s): step {', '.join(f'{t:.2f}' for t in times)} s; prompt tokens run {stats.prompt_tokens}, "
          f"completion tokens run {stats.tokens_computed} of {stats.tokens}, {stats.micro_batches} micro-batches")

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        trainer.step(groups)
    events = prof.key_averages(group_by_input_shape=True)
    total = sum(e.self_cpu_time_total for e in events)
    by_kind: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    flops: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0.0, 0.0])  # bucket -> [flop, seconds]
    for e in events:
        k = kind(e.key)
        by_kind[k] += e.self_cpu_time_total
        calls[k] += e.count
        shapes = e.input_shapes
        if e.key == "aten::mm" and len(shapes) >= 2 and len(shapes[0]) == 2 and len(shapes[1]) == 2:
            (m, n), (_, p) = shapes[0], shapes[1]
            bucket = next(b for b in ROWS if b[0] <= m <= b[1])
            flops[bucket][0] += 2.0 * m * n * p * e.count
            flops[bucket][1] += e.self_cpu_time_total / 1e6
    print(f"\nprofiled step: {total / 1e6:.2f} s of self time\n")
    print("| kind | share | seconds | calls |")
    print("|---|---|---|---|")
    for k, us in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"| {k} | {us / total:.0%} | {us / 1e6:.2f} | {calls[k]} |")
    print("\n| matrix product rows | GFLOP | seconds | GFLOP/s |")
    print("|---|---|---|---|")
    for lo, hi in ROWS:
        f, s = flops.get((lo, hi), (0.0, 0.0))
        if s:
            print(f"| {lo}-{hi if hi < 10**9 else ''} | {f / 1e9:.1f} | {s:.2f} | {f / 1e9 / s:.0f} |")


if __name__ == "__main__":
    main()
