"""Sampling as a prefix tree against whole-prompt decoding, side by side in one run (issue 22, item 1).

The same prompts a node makes (its preset's task mix, its prompt style and worked examples, drawn from
its own question stream), the same seeds, the same llama.cpp context; the two ways take turns,
``--repeats`` times each, and the fastest of each is reported. Two workloads:
  round: I + J questions x L completions, the node's max_tokens (a `make run` round's sampling);
  eval:  the held-out set, one greedy and two sampled answers each, in one call split to fit the context
         as the node's evaluation is (engine/run/evaluate.py; the node's context holds min(64, (I + J) L) sequences).

    python benchmarks/bench_prefix.py [--preset easy] [--questions 8] [--completions 4] [--threads 2]
"""

from __future__ import annotations

import argparse
import platform
import time

from engine.config import NodeConfig, resolve_auto
from engine.models.modelfile import bundled_model_path
from engine.models.working_copy import working_gguf
from engine.paths import default_cache_dir
from engine.sampling.llm import LlamaModel
from engine.sampling.rollout import RolloutGenerator, SamplingParams
from engine.tasks.questions import Prompts, QuestionStream, build_mix, heldout_set, question_key


def timed(gen: RolloutGenerator, prompts: list[list[int]], n: int, params: SamplingParams, greedy: int,
          batch: int) -> tuple[float, int, int, int]:
    """Seconds, new tokens, prompt tokens, prompt tokens computed: the prompts in batches of ``batch``."""
    gen.reseed(7)
    seconds = 0.0
    tokens = prompt = computed = 0
    for lo in range(0, len(prompts), batch):
        t0 = time.perf_counter()
        gen.generate(prompts[lo:lo + batch], n, params, greedy)
        seconds += time.perf_counter() - t0
        tokens += gen.last.tokens
        prompt += gen.last.prompt_tokens
        computed += gen.last.prompt_tokens_computed
    return seconds, tokens, prompt, computed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="easy")
    ap.add_argument("--questions", type=int, default=8, help="questions a round (I + J)")
    ap.add_argument("--completions", type=int, default=4, help="L")
    ap.add_argument("--eval-per-task", type=int, default=16, help="held-out questions per task (0: skip eval)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    cfg = resolve_auto(NodeConfig(preset=args.preset, completions=args.completions), n_params=135_000_000,
                       threads=args.threads)
    path = working_gguf(bundled_model_path(), cfg.weights, default_cache_dir() / "models")
    n_seq = min(64, args.questions * args.completions)  # as engine/run/backbone.py sizes it
    llm = LlamaModel(path, n_ctx=n_seq * cfg.max_tokens + 8192, n_seq_max=n_seq, threads=args.threads)
    mix = build_mix(cfg.preset, cfg.tasks, cfg.task_weights, cfg.task_config)
    held = heldout_set(mix, max(args.eval_per_task, 1))
    make = Prompts(mix, cfg.fewshot, frozenset(question_key(q) for q in held), llm.prompt_tokens, cfg.prompts)
    round_prompts = [make(q) for q in QuestionStream(mix, "bench", 0, held).draw(args.questions)]
    eval_prompts = [make(q) for q in held] if args.eval_per_task else []
    params = SamplingParams(cfg.max_tokens, cfg.temperature, cfg.top_k, cfg.top_p, cfg.stop_at_answer)
    works = [("round", round_prompts, args.completions, 0, args.questions)]
    if eval_prompts:
        works.append(("eval", eval_prompts, 3, 1, len(eval_prompts)))  # greedy + 2 samples, one generate call

    print(f"machine: {platform.processor() or platform.machine()}, {args.threads} threads; preset {cfg.preset}, "
          f"L = {args.completions}, max_tokens {cfg.max_tokens}; fastest of {args.repeats}")
    for name, prompts, n, greedy, batch in works:
        best: dict[bool, tuple[float, int, int, int]] = {}
        for _ in range(args.repeats):
            for share in (False, True):
                got = timed(RolloutGenerator(llm, share_prefixes=share), prompts, n, params, greedy, batch)
                if share not in best or got[0] < best[share][0]:
                    best[share] = got
        for share in (False, True):
            s, tok, prompt, computed = best[share]
            print(f"{name:5s} {'prefix tree' if share else 'whole prompts'}: {s:6.2f} s, {tok} new tokens "
                  f"({tok / s:.0f}/s), prompt tokens {prompt} -> computed {computed}")
        print(f"{name:5s} speedup {best[False][0] / best[True][0]:.2f}x "
              f"(prompt tokens computed {best[True][3] / best[True][2]:.0%} of whole)")
    llm.close()


if __name__ == "__main__":
    main()
