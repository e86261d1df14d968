"""``sapo-engine models --measure``: time the bundled model here, briefly (the estimate itself, its cache and
real rounds' refinement are ``engine.models.speed``)."""

from __future__ import annotations

import time
from pathlib import Path

from engine.models.catalog import bundled_entry
from engine.models.speed import (
    CACHE_VERSION,
    GEN_SEQS,
    GEN_TOKENS,
    TRAIN_COMPLETION,
    TRAIN_PROMPT,
    TRAIN_SEQS,
    Speed,
    cache_file,
    estimate_round_s,
    load_cached,
    record_round,
    save,
)

__all__ = ["CACHE_VERSION", "Speed", "cache_file", "estimate_round_s", "load_cached", "measure", "record_round"]


def measure(cache_dir: Path, threads: int) -> Speed:
    """Time the bundled model here (a few seconds of work after loading it) and cache the result."""
    import torch

    from engine.learning.policy import attach_lora, load_base, lora_config
    from engine.learning.trainer import TrainConfig, Trainer
    from engine.models.download import ensure_model
    from engine.models.working_copy import working_gguf
    from engine.sampling.llm import LlamaModel
    from engine.sampling.rollout import RolloutGenerator, SamplingParams
    from engine.tasks.groups import TrainGroup

    path = working_gguf(ensure_model(bundled_entry(), progress=False), "auto", cache_dir / "models")
    llm = LlamaModel(path, n_ctx=GEN_SEQS * (GEN_TOKENS + 64) + 512, n_seq_max=GEN_SEQS, threads=threads)
    try:
        prompt = llm.prompt_tokens([{"role": "user", "content": "Count from one to fifty in words."}])
        gen = RolloutGenerator(llm, seed=0)
        gen.generate([prompt], GEN_SEQS, SamplingParams(max_tokens=GEN_TOKENS, min_tokens=GEN_TOKENS,
                                                        stop_at_answer=False))
        gen_tps = gen.last.tokens_per_s
    finally:
        llm.close()
    torch.set_num_threads(threads)
    policy = attach_lora(load_base(path, cache_dir / "torch"), lora_config(16, 32.0, 0.0, [
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    trainer = Trainer(policy, TrainConfig(micro_batch=TRAIN_SEQS))
    group = TrainGroup(list(range(10, 10 + TRAIN_PROMPT)),
                       [list(range(200 + i, 200 + i + TRAIN_COMPLETION)) for i in range(TRAIN_SEQS)],
                       [1.0 if i % 2 else -1.0 for i in range(TRAIN_SEQS)])
    trainer.step([TrainGroup(group.prompt_ids, group.completions[:2], [1.0, -1.0])])  # warm-up: first-call costs
    t0 = time.perf_counter()
    trainer.step([group])
    train_tps = (TRAIN_PROMPT + TRAIN_SEQS * TRAIN_COMPLETION) / (time.perf_counter() - t0)
    speed = Speed(round(gen_tps, 2), round(train_tps, 2), threads, round(time.time(), 3))
    save(cache_dir, speed)
    return speed
