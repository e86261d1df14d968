"""What bounds a round's sampling: attention over the cache, the LoRA, or the weights' matrix products?

The same decoding work in several llama.cpp set-ups, side by side in one process, taking turns:
a `make run` round's 8 prompts (easy preset, the node's prompt style) x L = 4 completions, every
completion held to exactly ``--tokens`` tokens (end-of-generation masked, no stop at the answer), so
every variant decodes the same number of tokens whatever it samples. Variants:

  today          the node's set-up: one unified KV cache, prompts as a prefix tree, flash attention (auto)
  whole          the same, every prompt decoded whole (no prefix tree)
  no-fa          today's, flash attention off (every cell of the cache in every token's attention)
  streams        one KV stream per sequence (``kv_unified`` off: a token attends over its own stream
                 only), prompts whole; each stream holds 512 cells
  floor          today's set-up, but each prompt cut to its first 2 tokens: the same decoding steps and
                 matrix products with almost no attention, the bound any attention work could reach
  kv-q8_0        today's set-up with the KV cache in Q8_0 instead of F16 (about half its memory)
  gumbel         today's set-up with the sampler before 2026-12-05's: Gumbel-max, an exponential random
                 number for every vocabulary entry of every row at every step (``gumbel_sample`` below)

With ``--adapter FILE`` every variant runs with that LoRA loaded (as a node's rounds after the first do),
and ``no-lora`` (today's without it) is added. ``--weights q8_0,bf16`` adds today's set-up on each of
those working copies (``weights-FMT``; "today" runs the node's ``auto`` choice). Fastest of ``--repeats``
per variant.

    python benchmarks/bench_decode.py [--adapter lora.gguf] [--weights q8_0,bf16] [--only today,gumbel]
        [--tokens 96] [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import time
from pathlib import Path
from typing import Iterator

import llama_cpp.llama_cpp as lc
import numpy as np

import engine.sampling.rollout as rollout

from engine.config import NodeConfig, resolve_auto
from engine.models.modelfile import bundled_model_path
from engine.models.working_copy import working_gguf
from engine.paths import default_cache_dir
from engine.sampling.llm import LlamaModel
from engine.sampling.rollout import RolloutGenerator, SamplingParams
from engine.tasks.questions import Prompts, QuestionStream, build_mix, heldout_set, question_key

STREAM_CELLS = 512


def recontext(llm: LlamaModel, *, unified: bool = True, flash_attn: int = -1, n_ctx: int | None = None,
              kv_type: int = 1) -> None:
    """Replace ``llm``'s context with one of other settings (a benchmark's knob: the node has one set-up)."""
    p = lc.llama_context_default_params()
    p.n_ctx = n_ctx or llm.n_ctx
    p.n_batch = p.n_ubatch = llm.n_batch
    p.n_seq_max = llm.n_seq_max
    p.n_threads = p.n_threads_batch = lc.llama_n_threads(llm.ctx)
    p.kv_unified = unified
    p.flash_attn_type = flash_attn
    p.type_k = p.type_v = kv_type  # ggml types: 1 f16 (llama.cpp's default), 8 q8_0
    p.no_perf = True
    lc.llama_free(llm.ctx)
    llm.ctx = lc.llama_init_from_model(llm.model, p)
    if not llm.ctx:
        raise SystemExit("llama.cpp could not create the context")
    llm.n_ctx = lc.llama_n_ctx(llm.ctx)
    llm.memory = lc.llama_get_memory(llm.ctx)


def gumbel_sample(logits: np.ndarray, rng: np.random.Generator, temperature: float = 1.0, top_k: int = 0,
                  top_p: float = 1.0, logprobs: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """The sampler before 2026-12-05 (untruncated only): argmax(z - log E), E ~ Exp(1) per entry."""
    assert not top_k and top_p == 1.0
    z = logits / np.float32(temperature)
    with np.errstate(divide="ignore"):  # E == 0 has probability ~2^-24 an entry; -log(0) = inf is right
        tokens = (z - np.log(rng.standard_exponential(z.shape, dtype=np.float32))).argmax(axis=1)
    return tokens, (rollout.token_logprobs(logits, tokens, temperature) if logprobs else None)


@contextlib.contextmanager
def sampler(fn) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Decode with another sampling function (None: the engine's own)."""
    own = rollout.sample_tokens
    rollout.sample_tokens = fn or own
    try:
        yield
    finally:
        rollout.sample_tokens = own


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapter", type=Path, help="a LoRA (GGUF) loaded in every variant")
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--completions", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=96, help="tokens every completion runs to")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--weights", default="", help="comma-separated working formats to add, e.g. q8_0,bf16")
    ap.add_argument("--only", default="", help="comma-separated variants to run (default: all)")
    args = ap.parse_args()

    cfg = resolve_auto(NodeConfig(preset="easy", completions=args.completions), n_params=135_000_000,
                       threads=args.threads)
    path = working_gguf(bundled_model_path(), cfg.weights, default_cache_dir() / "models")
    n_seq = args.questions * args.completions
    n_ctx = n_seq * args.tokens + 8192  # as engine/run/backbone.py sizes it

    def model(weights: Path = path, **kw) -> LlamaModel:
        llm = LlamaModel(weights, n_ctx=n_ctx, n_seq_max=n_seq, threads=args.threads)
        if kw:
            recontext(llm, **kw)
        if args.adapter:
            llm.swap_adapter(args.adapter)
        return llm

    today = model()
    mix = build_mix(cfg.preset, cfg.tasks, cfg.task_weights, cfg.task_config)
    held = heldout_set(mix, 16)
    make = Prompts(mix, cfg.fewshot, frozenset(question_key(q) for q in held), today.prompt_tokens, cfg.prompts)
    prompts = [make(q) for q in QuestionStream(mix, "bench", 0, held).draw(args.questions)]
    if max(len(p) for p in prompts) + args.tokens > STREAM_CELLS:
        raise SystemExit(f"a prompt does not fit a stream of {STREAM_CELLS} cells")
    tiny = [p[:2] for p in prompts]
    only = set(filter(None, args.only.split(",")))
    wanted = lambda name: not only or name in only or name == "today"  # noqa: E731 (today: the ratios' base)
    # (name, model, prefix tree, prompts, sampler); a model is made only for a variant that runs
    variants: list[tuple[str, LlamaModel, bool, list[list[int]], object]] = [
        ("today", today, True, prompts, None),
        ("whole", today, False, prompts, None),
        ("floor", today, True, tiny, None),
        ("gumbel", today, True, prompts, gumbel_sample),
    ]
    if wanted("no-fa"):
        variants.append(("no-fa", model(flash_attn=0), True, prompts, None))
    if wanted("kv-q8_0"):
        variants.append(("kv-q8_0", model(kv_type=8), True, prompts, None))
    if wanted("streams"):
        variants.append(("streams", model(unified=False, n_ctx=n_seq * STREAM_CELLS), False, prompts, None))
    for fmt in filter(None, args.weights.split(",")):
        copy = working_gguf(bundled_model_path(), fmt, default_cache_dir() / "models")
        variants.append((f"weights-{fmt}", model(copy), True, prompts, None))
    if args.adapter and wanted("no-lora"):
        variants.append(("no-lora", LlamaModel(path, n_ctx=n_ctx, n_seq_max=n_seq, threads=args.threads), True,
                         prompts, None))
    variants = [v for v in variants if wanted(v[0]) or v[0].startswith("weights-")]
    params = SamplingParams(args.tokens, 1.0, min_tokens=args.tokens, stop_at_answer=False)

    print(f"machine: {platform.processor() or platform.machine()}, {args.threads} threads; working copy "
          f"{path.name}; {args.questions} prompts "
          f"({min(map(len, prompts))}-{max(map(len, prompts))} tokens) x {args.completions} completions x "
          f"{args.tokens} tokens; adapter: {args.adapter or 'none'}; fastest of {args.repeats}")
    best: dict[str, float] = {}
    for rep in range(args.repeats):
        for name, llm, share, ps, fn in variants:
            gen = RolloutGenerator(llm, seed=7, share_prefixes=share)
            with sampler(fn):
                t0 = time.perf_counter()
                gen.generate(ps, args.completions, params)
                seconds = time.perf_counter() - t0
            best[name] = min(best.get(name, float("inf")), seconds)
            print(f"  {rep} {name:8s} {seconds:6.2f} s ({gen.last.tokens} tokens, prompt tokens computed "
                  f"{gen.last.prompt_tokens_computed})", flush=True)
    print("\n| variant | fastest | tokens/s | against today |\n|---|---|---|---|")
    tokens = len(prompts) * args.completions * args.tokens
    for name, seconds in best.items():
        print(f"| {name} | {seconds:.2f} s | {tokens / seconds:.0f} | {best['today'] / seconds:.2f}x |")


if __name__ == "__main__":
    main()
