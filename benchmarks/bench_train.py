"""Peak memory and time of one GRPO training step, the engine's way against the naive way.

Each variant runs in its own process (peak RSS is per process), on the bundled model's
Q4_0 working copy, LoRA r 16 on all linear layers, random token ids, sequences of
``--prompt`` + ``--completion`` tokens:
  engine: micro-batches, gradient checkpointing, chunked target log-probs over completion positions;
  naive:  one forward over the whole batch, full-vocabulary logits and log-softmax at every position.

    python benchmarks/bench_train.py [--seqs 32] [--naive-seqs 16] [--prompt 64] [--completion 192]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(variant: str, seqs: int, prompt: int, completion: int, micro: int, cache: str, threads: int) -> None:
    import torch

    from engine.hardware import tune_allocator
    from engine.modelfile import bundled_model_path
    from engine.policy import attach_lora, load_base, lora_config
    from engine.groups import TrainSequence as Sample
from engine.trainer import TrainConfig, Trainer
    from engine.weights import working_gguf

    if variant == "engine":
        tune_allocator()  # part of the engine's way; the naive run keeps glibc's defaults
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    path = working_gguf(bundled_model_path(), "auto", Path(cache) / "models")
    model = attach_lora(load_base(path, Path(cache) / "torch"),
                        lora_config(16, 32, 0.0, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    rng = random.Random(0)
    samples = [Sample([rng.randrange(49152) for _ in range(prompt)], [rng.randrange(49152) for _ in range(completion)],
                      rng.uniform(-1, 1)) for _ in range(seqs)]
    t0 = time.perf_counter()
    if variant == "engine":
        trainer = Trainer(model, TrainConfig(micro_batch=micro))
        stats = trainer.step(samples)
        loss = stats.loss
    else:
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=3e-4)
        model.train()
        ids = torch.tensor([s.prompt_ids + s.completion_ids for s in samples])  # (B, T)
        logits = model(input_ids=ids).logits.float()  # (B, T, V): the whole thing
        logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, T-1)
        mask = torch.zeros_like(logp)
        mask[:, prompt - 1:] = 1
        adv = torch.tensor([s.advantage for s in samples])[:, None]
        loss_t = -(torch.exp(logp - logp.detach()) * adv * mask).sum() / mask.sum()
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        loss = float(loss_t)
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps({"variant": variant, "seqs": seqs, "tokens": seqs * (prompt + completion), "step_s": round(dt, 1),
                      "peak_rss_gib": round(peak, 2), "rss_after_load_gib": round(rss_loaded, 2), "loss": loss}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", type=int, default=32)
    ap.add_argument("--naive-seqs", type=int, default=16, help="the naive step needs ~0.7 GB per sequence here")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--completion", type=int, default=192)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", nargs=2, metavar=("VARIANT", "SEQS"))
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "sapo-bench-cache"))
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.prompt, args.completion, args.micro_batch, args.cache, args.threads)
        return
    print(f"one GRPO step, sequences of {args.prompt} + {args.completion} tokens, bundled model Q4_0, LoRA r16 all linear, "
          f"{args.threads} threads")
    runs = [("engine", args.seqs), ("engine", args.naive_seqs), ("naive", args.naive_seqs)]
    # Warm the dequantized-weights cache first so that no variant pays for (or peaks in) the GGUF conversion.
    subprocess.run([sys.executable, __file__, "--child", "engine", "1", "--prompt", "8", "--completion", "8", "--cache", args.cache],
                   check=True, capture_output=True)
    for variant, seqs in runs:
        out = subprocess.run([sys.executable, __file__, "--child", variant, str(seqs), "--prompt", str(args.prompt),
                              "--completion", str(args.completion), "--micro-batch", str(args.micro_batch),
                              "--threads", str(args.threads), "--cache", args.cache], capture_output=True, text=True)
        line = out.stdout.strip().splitlines()[-1] if out.returncode == 0 else json.dumps({"variant": variant, "seqs": seqs, "error": out.stderr[-300:]})
        print(line, flush=True)


if __name__ == "__main__":
    main()
