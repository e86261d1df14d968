"""``sapo-engine baseline``: where RL starts, per task, before any training.

    sapo-engine baseline [--model M] [--preset P] [--tasks a,b] [--weights F[,F..]] [--prompts P[,P..]]
                         [--per-task N] [--samples S] [--threads T] [--speed] [--json]

Per task of the mix, on its held-out questions (the node's own held-out set, ``--per-task`` of
them): greedy accuracy and sampled accuracy at the node's temperature and answer length (fully
correct answers only), each with its standard error over questions, and apart from them the
well-formed rate the format bonus pays for and the share of questions whose samples disagree
(the groups GRPO learns from). Sampled well below greedy: room to sharpen; greedy near 0:
little to learn from. The base model only: a trained node's progress is its own ``eval`` events.

Several weight formats or prompt styles are measured side by side in one run (the machine is
shared and noisy): each combination reuses the engine's evaluation (engine/run/evaluate.py: one
generate call, prompt KV shared by a question's greedy and sampled answers), and reports the
decoding speed of that call (new tokens/s, batched as rollouts run). ``--speed`` adds a
fixed-length probe per format (every sequence decodes the same number of tokens), repeated
with the formats interleaved.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from engine.config import WEIGHT_CHOICES
from engine.errors import SapoError
from engine.paths import path_arg

PROMPT_CHOICES = ("new", "old", "worked", "worked-nosys")
# Questions decoded together. Not more: every sequence of a llama.cpp batch attends over all the
# context's used cells (masked, but computed), so attention cost grows with the square of the batch;
# 8 questions keep it below the weights' cost on the easy preset.
QUESTIONS_PER_BATCH = 8
PROBE_QUESTIONS, PROBE_COMPLETIONS, PROBE_TOKENS, PROBE_REPEATS = 4, 8, 128, 2


def add_arguments(p: argparse.ArgumentParser, whole: Any) -> None:
    """``whole``: the CLI's whole-number converter (one-line errors)."""
    p.add_argument("--model", help="catalog name or .gguf path (default: as `run` chooses)")
    p.add_argument("--preset", help="task preset: easy or paper (default: as `run` chooses for the model)")
    p.add_argument("--tasks", help="comma-separated reasoning-gym datasets (default: the preset's)")
    p.add_argument("--config", type=path_arg, help="TOML settings file, as for `run` (e.g. [task_config.TASK] tables)")
    p.add_argument("--weights", default="auto", help=f"comma-separated working formats, each one of "
                   f"{', '.join(WEIGHT_CHOICES)} (as-is: the file as shipped)")
    p.add_argument("--prompts", default="new", help=f"comma-separated prompt styles, each one of {', '.join(PROMPT_CHOICES)}")
    p.add_argument("--per-task", type=whole, default=48, help="held-out questions per task")
    p.add_argument("--samples", type=whole, default=4, help="sampled answers per question (plus one greedy)")
    p.add_argument("--max-tokens", type=whole, help="new tokens per answer (default: the node's)")
    p.add_argument("--fewshot", type=whole, help="examples per prompt (default: the node's)")
    p.add_argument("--threads", type=whole, help="CPU threads (default: physical cores)")
    p.add_argument("--seed", type=whole, default=0, help="sampling seed")
    p.add_argument("--speed", action="store_true", help="also time fixed-length batched decoding per format")
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")


def _choices(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if not items:
        raise SapoError(f"--{what} is empty")
    for item in items:
        if item not in allowed:
            raise SapoError(f"unknown {what} {item!r}: choose from {', '.join(allowed)}")
    return items


def run(args: argparse.Namespace) -> int:
    weights = _choices(args.weights, WEIGHT_CHOICES, "weights")
    prompts = _choices(args.prompts, PROMPT_CHOICES, "prompts")
    if not 1 <= args.per_task <= 1000:
        raise SapoError(f"--per-task must be 1..1000, got {args.per_task}")
    if not 1 <= args.samples <= 16:
        raise SapoError(f"--samples must be 1..16, got {args.samples}")
    from engine.config import build_config, load_toml

    flags = {"model": args.model, "preset": args.preset, "max_tokens": args.max_tokens, "fewshot": args.fewshot,
             "threads": args.threads,
             "tasks": [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks is not None else None}
    cfg = build_config(load_toml(args.config) if args.config else {}, {k: v for k, v in flags.items() if v is not None})
    if cfg.tasks is not None and not cfg.tasks:
        raise SapoError("--tasks is empty")

    from engine.models.prepare import prepare_model

    # Task settings are checked before the model loads; each format's working copy is made by measure().
    model = prepare_model(cfg, weights="as-is")
    cfg = model.cfg
    report = measure(cfg, model.source, model.name, weights, prompts, args.per_task, args.samples, args.seed, args.speed)
    print(json.dumps(report) if args.json else format_report(report))
    return 0


def measure(cfg: Any, source: Path, model_name: str, weights: list[str], prompts: list[str], per_task: int,
            samples: int, seed: int, speed: bool) -> dict[str, Any]:
    from engine.run.evaluate import eval_groups, task_spread
    from engine.tasks.groups import ScoredGroup
    from engine.sampling.llm import LlamaModel
    from engine.paths import default_cache_dir
    from engine.sampling.rollout import RolloutGenerator, SamplingParams
    from engine.sandbox.workers import Sandbox, score_groups
    from engine.tasks.questions import Prompts, build_mix, derive_seed, heldout_set, question_key
    from engine.models.working_copy import choose_format, source_ftype, working_gguf

    mix = build_mix(cfg.preset, cfg.tasks, cfg.task_weights, cfg.task_config)
    heldout = heldout_set(mix, per_task)
    exclude = frozenset(question_key(q) for q in heldout)
    params = SamplingParams(cfg.max_tokens, cfg.temperature, cfg.top_k, cfg.top_p, cfg.stop_at_answer)
    report: dict[str, Any] = {
        "model": model_name, "source_file_type": source_ftype(source), "preset": cfg.preset,
        "tasks": [e.dataset for e in mix], "per_task": per_task, "samples": samples, "max_tokens": cfg.max_tokens,
        "temperature": cfg.temperature, "fewshot": cfg.fewshot, "threads": cfg.threads, "runs": [], "speed": []}
    llms: dict[str, Any] = {}
    try:
        with Sandbox(2) as sandbox:
            sandbox.wait_ready()
            for w in weights:
                path = working_gguf(source, w, default_cache_dir() / "models")
                n_seq = max(QUESTIONS_PER_BATCH * (1 + samples), PROBE_QUESTIONS * PROBE_COMPLETIONS if speed else 0)
                llm = llms[w] = LlamaModel(path, n_ctx=n_seq * cfg.max_tokens + 8192, n_seq_max=n_seq,
                                           threads=cfg.threads)
                gen = RolloutGenerator(llm)
                for p in prompts:
                    make_prompt = Prompts(mix, cfg.fewshot, exclude, llm.prompt_tokens, p)
                    gen.reseed(derive_seed("baseline", seed))  # every combination draws from the same stream

                    def rollout(questions: list[Any], prm: Any, n: int, greedy: int = 0) -> list[ScoredGroup]:
                        ids = [make_prompt(q) for q in questions]
                        outs = gen.generate(ids, n, prm, greedy)
                        scored = score_groups(sandbox, list(zip(questions, outs)), cfg.format_bonus)
                        return [ScoredGroup(q, i, cs, sc) for q, i, cs, (sc, _) in zip(questions, ids, outs, scored)]

                    t0 = time.perf_counter()
                    groups = eval_groups(rollout, heldout, params, samples)
                    report["runs"].append({
                        "weights": w, "format": choose_format(source, w) or "as-is", "prompts": p,
                        "tokens_per_s": round(gen.last.tokens_per_s, 1), "tokens": gen.last.tokens,
                        "seconds": round(time.perf_counter() - t0, 1), "per_task": task_spread(groups)})
                    # each result as soon as it is known: a long comparison interrupted keeps what it measured
                    print(f"baseline: {json.dumps(report['runs'][-1])}", file=sys.stderr, flush=True)
            if speed:
                report["speed"] = _probe(llms, heldout, mix, cfg, exclude)
    finally:
        for llm in llms.values():
            llm.close()
    return report


def _probe(llms: dict[str, Any], heldout: list[Any], mix: Any, cfg: Any, exclude: frozenset[str]) -> list[dict[str, Any]]:
    """Fixed-length batched decoding, formats interleaved, ``PROBE_REPEATS`` times each."""
    from engine.sampling.rollout import RolloutGenerator, SamplingParams
    from engine.tasks.questions import Prompts

    params = SamplingParams(max_tokens=PROBE_TOKENS, min_tokens=PROBE_TOKENS, stop_at_answer=False)
    figures: dict[str, list[float]] = {w: [] for w in llms}
    for _ in range(PROBE_REPEATS):
        for w, llm in llms.items():
            ids = [Prompts(mix, cfg.fewshot, exclude, llm.prompt_tokens)(q) for q in heldout[:PROBE_QUESTIONS]]
            gen = RolloutGenerator(llm, seed=0)
            gen.generate(ids[:1], 1, SamplingParams(max_tokens=4))  # warm-up
            gen.generate(ids, PROBE_COMPLETIONS, params)
            figures[w].append(round(gen.last.tokens_per_s, 1))
    return [{"weights": w, "fixed_tokens_per_s": v,
             "how": f"{PROBE_QUESTIONS} prompts (the first task's) x {PROBE_COMPLETIONS} completions x "
                    f"{PROBE_TOKENS} tokens"}
            for w, v in figures.items()]


def format_report(report: dict[str, Any]) -> str:
    lines = [f"{report['model']}, {report['preset']} preset: {report['per_task']} held-out questions per task, "
             f"greedy + {report['samples']} samples at T = {report['temperature']}, <= {report['max_tokens']} tokens, "
             f"{report['fewshot']} examples, {report['threads']} threads",
             "accuracy is fully correct answers only, +- one standard error over questions; fmt = well-formed "
             "answer tags (the format bonus), spread = questions whose samples disagree",
             f"{'weights':<8} {'prompts':<13} {'task':<24} {'greedy':>13} {'sampled':>13} {'fmt':>5} {'spread':>6}"]
    for r in report["runs"]:
        for task, s in r["per_task"].items():
            lines.append(f"{r['weights']:<8} {r['prompts']:<13} {task:<24} "
                         f"{s['greedy_accuracy']:>6.3f}+-{s['greedy_se']:.3f} "
                         f"{s['sampled_accuracy']:>6.3f}+-{s['sampled_se']:.3f} "
                         f"{s['format_rate']:>5.2f} {s['groups_with_spread']:>6.2f}")
        lines.append(f"{r['weights']:<8} {r['prompts']:<13} decoding {r['tokens_per_s']:.1f} new tokens/s "
                     f"({r['tokens']} tokens, {r['seconds']} s)")
    for s in report["speed"]:
        lines.append(f"{s['weights']:<8} fixed-length decoding ({s['how']}): "
                     + ", ".join(f"{x:.1f}" for x in s["fixed_tokens_per_s"]) + " tokens/s")
    return "\n".join(lines)
