"""What sandboxed scoring adds to a round of the bundled model, measured side by side in one run.

1. a real round: ``sapo-engine run --offline`` on the bundled model with the default settings
   for it (easy preset, I + J = 8 groups of L = 4, 96 tokens); the median ``round_s`` of its rounds;
2. the same amount of scoring (8 groups x 4 real completions of the bundled model), timed
   a) in-process with reasoning-gym's scorers (what the node did before the sandbox), and
   b) through the sandbox (what the node does now: one job per group, the pool of 2 workers);
   the difference, per round, against the round's time is the sandbox's cost.

    python benchmarks/bench_scoring.py [--rounds 4] [--repeats 50] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engine.sampling.llm import LlamaModel
from engine.models.modelfile import bundled_model_path
from engine.tasks.rewards import extract_answer, make_score, score_completion
from engine.sampling.rollout import RolloutGenerator, SamplingParams
from engine.sandbox.safe_scoring import capped
from engine.sandbox.workers import Job, Sandbox
from engine.tasks.questions import Prompts, QuestionStream, build_mix, scorer_for
from engine.models.working_copy import working_gguf


def round_seconds(rounds: int, threads: int, cache: Path) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        events = Path(tmp) / "events.jsonl"
        subprocess.run([sys.executable, "-m", "engine", "run", "--offline", "--model", "smollm2-135m", "--rounds",
                        str(rounds), "--eval-every", "0", "--threads", str(threads), "--quiet", "--data-dir", tmp,
                        "--events", str(events)], check=True, env={**os.environ, "SAPO_CACHE_DIR": str(cache)})
        return [e["round_s"] for e in map(json.loads, events.read_text().splitlines()) if e["type"] == "round"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    cache = Path(os.environ.get("SAPO_CACHE_DIR", tempfile.mkdtemp()))

    mix = build_mix("easy")
    model = working_gguf(bundled_model_path(), "auto", cache / "models")
    llm = LlamaModel(model, n_ctx=32 * 96 + 8192, n_seq_max=32, threads=args.threads)
    questions = QuestionStream(mix, "b" * 32, 0, []).draw(8)
    prompts = Prompts(mix, 2, frozenset(), llm.prompt_tokens)
    outs = RolloutGenerator(llm, seed=1).generate([prompts(q) for q in questions], 4, SamplingParams(max_tokens=96))
    llm.close()

    def in_process() -> None:
        for q, cs in zip(questions, outs):
            scorer = scorer_for(q.spec)
            [score_completion(scorer, q.entry, c.text, 0.1) for c in cs]

    t0 = time.perf_counter()
    sandbox = Sandbox(2)
    sandbox.wait_ready()
    startup = time.perf_counter() - t0

    def sandboxed() -> None:
        jobs = [Job(q.spec, [capped(extract_answer(c.text)) for c in cs]) for q, cs in zip(questions, outs)]
        for r, cs in zip(sandbox.run(jobs), outs):
            [make_score(ts, c.text, 0.1) for ts, c in zip(r.scores, cs)]

    timings: dict[str, list[float]] = {"in_process": [], "sandbox": []}
    for _ in range(args.repeats):  # interleaved: both see the same machine load
        for name, fn in (("in_process", in_process), ("sandbox", sandboxed)):
            t = time.perf_counter()
            fn()
            timings[name].append(time.perf_counter() - t)
    sandbox.close()
    ip, sb = (statistics.median(timings[k]) for k in ("in_process", "sandbox"))
    print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"scoring a round's 8 groups x 4: in-process {ip * 1000:.1f} ms, sandbox {sb * 1000:.1f} ms "
          f"(medians of {args.repeats})", flush=True)
    print(f"sandbox startup (2 workers, once per node, overlaps model loading): {startup:.2f} s", flush=True)

    rounds = round_seconds(args.rounds, args.threads, cache)
    round_s = statistics.median(rounds)
    print(f"round of the bundled model (8 groups x 4, 96 tokens, {args.threads} threads): median {round_s:.2f} s "
          f"over {len(rounds)} rounds {[round(r, 2) for r in rounds]}; load average {os.getloadavg()[0]:.1f}")
    print(f"sandbox cost per round: {(sb - ip) * 1000:.1f} ms = {100 * (sb - ip) / round_s:.2f} % of a round")


if __name__ == "__main__":
    main()
