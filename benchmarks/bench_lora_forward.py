"""peft's LoRA forward against ``FusedLoraLinear`` (engine/learning/policy.py), in one process, alternating.

One GRPO step of the node's default trainer on 8 real easy-preset groups of 4 answers sampled from the
bundled model (``bench_train.py``'s groups), the same model and trainer, only the LoRA layers' class switched
between steps: the comparison has no process-to-process difference (allocator, memory layout), and a busy
spell of a shared machine falls on both alike. First the two gradients of one step from the same weights are
compared (the fused forward claims peft's bit for bit); then ``--repeats`` timed steps each, in turns.

    python benchmarks/bench_lora_forward.py [--repeats 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from engine.learning.policy import attach_lora, load_base, lora_config, set_fused_lora
from engine.learning.trainer import TrainConfig, Trainer
from engine.models.accel import memory_budget
from engine.models.hardware import tune_allocator
from engine.paths import default_cache_dir
from engine.tasks.groups import TrainGroup

sys.path.insert(0, str(Path(__file__).parent))
import bench_train  # noqa: E402  (its groups and model path)

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    tune_allocator()
    torch.set_num_threads(args.threads)
    cache = default_cache_dir()
    groups_file = Path(tempfile.gettempdir()) / "sapo-bench-lora-forward-easy-8x4.json"
    if not groups_file.exists():
        bench_train.make_groups("easy", 8, 4, cache, args.threads, groups_file)
    groups = [TrainGroup(g["prompt"], g["completions"], g["advantages"]) for g in json.loads(groups_file.read_text())]
    cpu = torch.device("cpu")
    model = attach_lora(load_base(bench_train._model_path(cache), cache / "torch", dtype=torch.bfloat16, device=cpu),
                        lora_config(16, 32, 0.0, TARGETS))
    with torch.no_grad():  # a trained adapter's B is not zero; a fresh one's would leave half the products idle
        torch.manual_seed(1)
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.01)
    trainer = Trainer(model, TrainConfig(micro_batch=8, memory_budget=memory_budget(None, cpu)))
    trainer.step(groups[:1])  # warm-up

    def gradients(fused: bool) -> dict[str, torch.Tensor]:
        set_fused_lora(model, fused)
        lr = [g["lr"] for g in trainer.optimizer.param_groups]
        for g in trainer.optimizer.param_groups:
            g["lr"] = 0.0  # the weights stay where they are
        trainer.step(groups)
        for g, r in zip(trainer.optimizer.param_groups, lr):
            g["lr"] = r
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    peft_grads, fused_grads = gradients(False), gradients(True)
    same = sum(torch.equal(peft_grads[n], fused_grads[n]) for n in peft_grads)
    print(f"machine: {platform.processor() or platform.machine()}, {args.threads} threads; {len(groups)} easy groups "
          f"x 4 answers; LoRA gradients bit for bit equal in {same} of {len(peft_grads)} tensors", flush=True)
    times: dict[str, list[float]] = {"peft": [], "fused": []}
    for _ in range(args.repeats):
        for name, fused in (("peft", False), ("fused", True)):
            set_fused_lora(model, fused)
            t0 = time.perf_counter()
            trainer.step(groups)
            times[name].append(time.perf_counter() - t0)
    ratios = [p / f for p, f in zip(times["peft"], times["fused"])]
    print(f"step, fastest of {args.repeats}: peft {min(times['peft']):.2f} s, fused {min(times['fused']):.2f} s "
          f"({min(times['peft']) / min(times['fused']):.3f}x); medians {statistics.median(times['peft']):.2f} s, "
          f"{statistics.median(times['fused']):.2f} s; paired ratio median {statistics.median(ratios):.3f}x, "
          f"fused faster in {sum(r > 1 for r in ratios)} of {len(ratios)}")


if __name__ == "__main__":
    main()
