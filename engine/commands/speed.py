"""How long a round takes on this machine: a short measurement of the bundled model, scaled.

The wizard shows each catalog model's expected round time, and the recommendation weighs
it: on a 2-core laptop a 0.5B model fits in memory but makes every round several times
slower. Measuring each model would mean downloading it; instead the bundled 135M model is
timed once (batched generation in llama.cpp, one LoRA training step in torch, each a few
seconds) and cached per machine, and the figures are scaled by parameter count: CPU decoding
of a batch and a training step both cost about 2 x params FLOPs per token. The estimate is
an estimate: the wizard says so and shows it rounded.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.models.catalog import CatalogEntry, bundled_entry
from engine.config import TINY_PARAMS

GEN_SEQS, GEN_TOKENS = 8, 32  # the generation probe: one batch
TRAIN_SEQS, TRAIN_PROMPT, TRAIN_COMPLETION = 4, 96, 32  # the training probe: one group, one micro-batch
ANSWER_FILL = 0.5  # answers end at </answer> well before max_tokens, about half way on average
PROMPT_TOKENS = {True: 350, False: 150}  # per prompt: tiny models get 2 worked examples in it
ROUND_GROUPS = 8  # I + J at their defaults (4 + 4)
CACHE_VERSION = 3  # 2: training measured with the shared-prefix trainer; 3: auto working copy is Q8_0


@dataclass(frozen=True)
class Speed:
    gen_tokens_per_s: float  # new tokens per second, batch of GEN_SEQS, bundled model
    train_tokens_per_s: float  # tokens per second through a LoRA step (a group's prompt counted once)
    threads: int
    measured_at: float
    how: str = f"bundled model: {GEN_SEQS} x {GEN_TOKENS} tokens generated, one LoRA step on a {TRAIN_PROMPT}-token " \
               f"prompt with {TRAIN_SEQS} x {TRAIN_COMPLETION}-token answers"


def estimate_round_s(entry: CatalogEntry, speed: Speed) -> float:
    """Expected seconds of one round with the default settings for this model's size."""
    tiny = entry.n_params < TINY_PARAMS
    completions, max_tokens = (4, 96) if tiny else (8, 256)
    seqs = ROUND_GROUPS * completions
    answer = max_tokens * ANSWER_FILL
    scale = entry.n_params / bundled_entry().n_params
    generate = seqs * answer / speed.gen_tokens_per_s * scale
    train = (ROUND_GROUPS * PROMPT_TOKENS[tiny] + seqs * answer) / speed.train_tokens_per_s * scale  # shared prefix
    return generate + train


def cache_file(cache_dir: Path) -> Path:
    return cache_dir / "speed.json"


def load_cached(cache_dir: Path, threads: int) -> Speed | None:
    try:
        data = json.loads(cache_file(cache_dir).read_text())
        if data.pop("version", None) != CACHE_VERSION or data.get("threads") != threads:
            return None
        return Speed(**data)
    except (OSError, ValueError, TypeError):
        return None


def measure(cache_dir: Path, threads: int) -> Speed:
    """Time the bundled model here (a few seconds of work after loading it) and cache the result."""
    import torch

    from engine.models.download import ensure_model
    from engine.tasks.groups import TrainGroup
    from engine.sampling.llm import LlamaModel
    from engine.learning.policy import attach_lora, load_base, lora_config
    from engine.sampling.rollout import RolloutGenerator, SamplingParams
    from engine.learning.trainer import TrainConfig, Trainer
    from engine.models.working_copy import working_gguf

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
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_file(cache_dir).with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(speed) | {"version": CACHE_VERSION}))
    tmp.replace(cache_file(cache_dir))
    return speed
