"""How long a round takes on this machine: the cached estimate (``engine.commands.speed`` measures it), and
real rounds replacing it.

The wizard shows each catalog model's expected round time, and the recommendation weighs
it: on a 2-core laptop a 0.5B model fits in memory but makes every round several times
slower. Measuring each model would mean downloading it; instead the bundled 135M model is
timed once (batched generation in llama.cpp, one LoRA training step in torch, each a few
seconds) and cached per machine, and the figures are scaled by parameter count: CPU decoding
of a batch and a training step both cost about 2 x params FLOPs per token. The estimate is
an estimate: the wizard says so and shows it rounded.

Real rounds then replace it (``record_round``): a node's rounds rewrite the cached rates from what
they measured (scaled to the bundled model's size, as the probe's are) and keep the model's own
round times, which are its estimate from then on; the probe's tiny batches understate a round's
throughput, so its first estimate runs high.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.config import TINY_PARAMS
from engine.models.catalog import CatalogEntry, bundled_entry

GEN_SEQS, GEN_TOKENS = 8, 32  # the generation probe: one batch
TRAIN_SEQS, TRAIN_PROMPT, TRAIN_COMPLETION = 4, 96, 32  # the training probe: one group, one micro-batch
ANSWER_FILL = 0.5  # answers end at </answer> well before max_tokens, about half way on average
PROMPT_TOKENS = {True: 350, False: 150}  # per prompt: tiny models get 2 worked examples in it
ROUND_GROUPS = 8  # I + J at their defaults (4 + 4)
CACHE_VERSION = 4  # 2: training measured with the shared-prefix trainer; 3: auto working copy is Q8_0;
# 4: auto working copy is BF16 on CPUs with AVX512-BF16


@dataclass(frozen=True)
class Speed:
    gen_tokens_per_s: float  # new tokens per second, batch of GEN_SEQS, bundled model
    train_tokens_per_s: float  # tokens per second through a LoRA step (a group's prompt counted once)
    threads: int
    measured_at: float
    how: str = f"bundled model: {GEN_SEQS} x {GEN_TOKENS} tokens generated, one LoRA step on a {TRAIN_PROMPT}-token " \
               f"prompt with {TRAIN_SEQS} x {TRAIN_COMPLETION}-token answers"
    round_s: dict[str, list[float]] = field(default_factory=dict)  # model name -> its last real rounds' seconds


REAL_ROUNDS = 5  # a model's last real rounds kept: its estimate is their median (a practice test or a slow one
# apart)


def shape(n_params: int) -> tuple[int, int]:
    """Completions per question and max tokens per answer that the estimate assumes (the auto defaults)."""
    return (4, 96) if n_params < TINY_PARAMS else (8, 256)


def estimated_shape(completions: int, max_tokens: int, groups: int, n_params: int) -> bool:
    """A run's rounds are the estimate's kind of round: its default size (tests' and experiments' small or big
    rounds would make it wrong for everyone else)."""
    return (completions, max_tokens) == shape(n_params) and groups == ROUND_GROUPS


def estimate_round_s(entry: CatalogEntry, speed: Speed) -> float:
    """Expected seconds of one round with the default settings for this model's size: its real rounds' when it
    has run here."""
    if speed.round_s.get(entry.name):
        return statistics.median(speed.round_s[entry.name])
    tiny = entry.n_params < TINY_PARAMS
    completions, max_tokens = shape(entry.n_params)
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


def save(cache_dir: Path, speed: Speed) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_file(cache_dir).with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(speed) | {"version": CACHE_VERSION}))
    tmp.replace(cache_file(cache_dir))


def record_round(cache_dir: Path, threads: int, model: str, n_params: int, metrics: dict[str, Any]) -> Speed | None:
    """A real round replaces the estimate's inputs: its generation and training rates, scaled to the bundled
    model's size, and the model's own round time. Only for the thread count the estimate is for (or with no
    estimate yet); a round with a practice test is not a round's usual time. None when nothing was recorded."""
    gen_s, train_s = metrics.get("gen_s") or 0.0, metrics.get("train_s") or 0.0
    train_tokens = (metrics.get("train_prompt_tokens") or 0) + (metrics.get("train_completion_tokens") or 0)
    if gen_s <= 0 or train_s <= 0 or not train_tokens or metrics.get("eval_s"):
        return None
    cached = load_cached(cache_dir, threads)
    if cached is None and cache_file(cache_dir).exists():
        return None  # an estimate for another thread count: left as it is
    scale = n_params / bundled_entry().n_params
    times = ((cached.round_s if cached else {}).get(model, []) + [round(metrics["round_s"], 1)])[-REAL_ROUNDS:]
    speed = Speed(round(metrics["gen_tokens"] / gen_s * scale, 2), round(train_tokens / train_s * scale, 2), threads,
                  round(time.time(), 3), how=f"real rounds of {model}",
                  round_s=(cached.round_s if cached else {}) | {model: times})
    save(cache_dir, speed)
    return speed
