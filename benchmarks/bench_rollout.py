"""Rollout throughput, side by side in one run, on the bundled model.

Same prompts (Q questions x L completions), same max new tokens, same threads, temperature 1:
  1. the engine: batched llama.cpp, the node's working weights (Q4_0 requantized from Q4_1);
  2. the engine on the weights as shipped (Q4_1);
  3. llama.cpp one completion at a time (Q4_0);
  4. Hugging Face generate, fp32, all Q x L sequences in one batch;
  5. Hugging Face generate, one call per completion (what the reference implementation does),
     on a subset of completions (it is slow) and reported per token.
Optionally (--quality) the held-out greedy accuracy and sampled reward of both weight formats.

    python benchmarks/bench_rollout.py [--questions 4] [--completions 8] [--max-tokens 128] [--threads 2]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import torch

from engine.sampling.llm import LlamaModel
from engine.models.modelfile import bundled_model_path
from engine.sampling.rollout import RolloutGenerator, SamplingParams
from engine.tasks.questions import build_messages, build_mix, fewshot_messages, heldout_set
from engine.models.working_copy import working_gguf


def prompts_for(llm: LlamaModel, n: int) -> list[list[int]]:
    entry = build_mix("easy")[0]  # basic_arithmetic, with the easy preset's two worked examples
    return [llm.prompt_tokens(build_messages(q.question, fewshot_messages(entry, 2))) for q in heldout_set((entry,), n)]


def bench_llama(path: Path, prompts: list[list[int]], L: int, params: SamplingParams, threads: int,
                one_at_a_time: bool = False, gpu_layers: int = 0) -> tuple[float, int, float]:
    n_seq = 1 if one_at_a_time else len(prompts) * L
    llm = LlamaModel(path, n_ctx=n_seq * params.max_tokens + 4096, n_seq_max=n_seq, threads=threads,
                     n_gpu_layers=gpu_layers)
    gen = RolloutGenerator(llm, seed=0)
    gen.generate(prompts[:1], 1, SamplingParams(max_tokens=4))  # warm-up: weight repacking, graph
    t0 = time.perf_counter()
    tokens = 0
    if one_at_a_time:
        for p in prompts:
            for _ in range(L):
                tokens += len(gen.generate([p], 1, params)[0][0].token_ids)
    else:
        tokens = sum(len(c.token_ids) for g in gen.generate(prompts, L, params) for c in g)
    dt = time.perf_counter() - t0
    llm.close()
    return tokens / dt, tokens, dt


def bench_hf(model: torch.nn.Module, prompts: list[list[int]], L: int, max_tokens: int, pad_id: int, eos_ids: list[int],
             per_completion: int | None = None, fixed: bool = False) -> tuple[float, int, float]:
    def generate(batch: list[list[int]]) -> int:
        width = max(len(p) for p in batch)
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in batch])  # left padding
        attn = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=attn, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                 max_new_tokens=max_tokens, min_new_tokens=max_tokens if fixed else 0,
                                 pad_token_id=pad_id, eos_token_id=eos_ids, use_cache=True)
        new = out[:, width:]
        count = 0
        for row in new.tolist():  # real tokens: up to and including the first end-of-generation token
            for t in row:
                count += 1
                if t in eos_ids:
                    break
        return count

    t0 = time.perf_counter()
    if per_completion is None:
        tokens = generate([p for p in prompts for _ in range(L)])
    else:
        tokens = sum(generate([p]) for p in prompts[:1] for _ in range(per_completion))
    dt = time.perf_counter() - t0
    return tokens / dt, tokens, dt


def quality(path: Path, threads: int, per_task: int) -> tuple[float, float]:
    from engine.tasks.rewards import score_completion
    from engine.tasks.questions import scorer_for

    mix = build_mix("easy")
    held = heldout_set(mix, per_task)
    llm = LlamaModel(path, n_ctx=64 * 96 + 8192, n_seq_max=64, threads=threads)
    gen = RolloutGenerator(llm, seed=0)
    by_task = {e.dataset: e for e in mix}
    prompts = [llm.prompt_tokens(build_messages(q.question, fewshot_messages(by_task[q.spec.dataset], 2))) for q in held]
    greedy = gen.generate(prompts, 1, SamplingParams(max_tokens=96, temperature=0))
    sampled = gen.generate(prompts, 4, SamplingParams(max_tokens=96))
    acc = np.mean([score_completion(scorer_for(q.spec), q.entry, g[0].text).correct for q, g in zip(held, greedy)])
    rew = np.mean([score_completion(scorer_for(q.spec), q.entry, c.text).task_score for q, g in zip(held, sampled) for c in g])
    llm.close()
    return float(acc), float(rew)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--completions", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--hf-loop-completions", type=int, default=4, help="completions timed for the per-completion HF loop")
    ap.add_argument("--quality", type=int, default=0, metavar="N", help="also compare formats on N held-out questions per task")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    shipped = bundled_model_path()
    cache = Path(tempfile.mkdtemp(prefix="sapo-bench-"))
    q4_0 = working_gguf(shipped, "auto", cache)
    probe = LlamaModel(q4_0, n_ctx=2048, n_seq_max=1, threads=args.threads)
    prompts = prompts_for(probe, args.questions)
    eos_ids = [t for t in range(probe.n_vocab) if probe.eog_mask[t]]
    probe.close()
    L, T = args.completions, args.max_tokens
    print(f"machine: {platform.processor() or platform.machine()}, {psutil.cpu_count(logical=False)} cores, "
          f"{psutil.virtual_memory().total / 2**30:.0f} GiB; threads {args.threads}")
    print(f"workload: {len(prompts)} questions x {L} completions, <= {T} new tokens, "
          f"prompt ~{np.mean([len(p) for p in prompts]):.0f} tokens, T=1")
    from engine.learning.policy import load_base

    hf = load_base(q4_0, cache / "torch")
    for fixed in (True, False):
        # fixed: every sequence makes exactly T tokens (pure throughput, nothing wasted on finished rows);
        # natural: sequences stop at end-of-generation, as in training (what a round really costs).
        params = SamplingParams(max_tokens=T, stop_at_answer=False, min_tokens=T if fixed else 0)
        rows = [
            ("engine: batched llama.cpp, Q4_0 (working copy)", *bench_llama(q4_0, prompts, L, params, args.threads)),
            ("engine: batched llama.cpp, Q4_1 (as shipped)", *bench_llama(shipped, prompts, L, params, args.threads)),
            ("llama.cpp one completion at a time, Q4_0", *bench_llama(q4_0, prompts, L, params, args.threads, True)),
            (f"HF generate fp32, batch {len(prompts) * L}", *bench_hf(hf, prompts, L, T, 2, eos_ids, fixed=fixed)),
            ("HF generate fp32, one call per completion",
             *bench_hf(hf, prompts, L, T, 2, eos_ids, args.hf_loop_completions, fixed=fixed)),
        ]
        base = rows[0][1]
        print(f"\n{'fixed length' if fixed else 'natural stop'}:")
        print(f"{'method':<52} {'tok/s':>8} {'tokens':>7} {'seconds':>8} {'engine x':>9}")
        for name, tps, tok, dt in rows:
            print(f"{name:<52} {tps:8.1f} {tok:7d} {dt:8.2f} {base / tps:9.2f}", flush=True)
    if args.quality:
        print(f"\nweight format vs quality (easy preset, {args.quality} held-out questions per task, 96 tokens):")
        for name, path in (("Q4_0", q4_0), ("Q4_1", shipped)):
            acc, rew = quality(path, args.threads, args.quality)
            print(f"  {name}: greedy pass@1 {acc:.3f}, sampled task score (T=1, 4 per question) {rew:.3f}")


if __name__ == "__main__":
    main()
