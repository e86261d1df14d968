"""How often do completions state held-out answers in their working (issue 23 item 5)?

The bundled model samples, with a node's own prompts (easy preset, 2 worked examples, temperature 1):
- ``heldout``: the held-out questions themselves (what a completion that "states a held-out answer" looks like);
- ``training``: questions of a node's own stream (never held out), the groups a node shares: how many of
  these would the receiver's rule (engine/tasks/leakage.py) refuse by mistake?
Hostile completions: each training completion with one held-out question and its answer added to its working,
in four wordings (the question's own text, its bare expression/numbers, spelled out digit by digit, and with
its numbers and operators in words): how many does the rule catch?

    python benchmarks/bench_heldout_leak.py [--per-task 16] [--completions 4] [--threads 2]
    python benchmarks/bench_heldout_leak.py --cost [--per-task 32]   # the check's cost, adversarial input, no model

``--cost``: the whole check (every reading of the text, every held-out mark) of one completion of
``COST_CHARS`` characters built by repeating a fragment chosen to make the readings work hardest (number words,
digit runs, year forms, operators); fastest of 3 and the slowest input are printed.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import tempfile
from pathlib import Path

from num2words import num2words

from engine.models.modelfile import bundled_model_path
from engine.models.working_copy import working_gguf
from engine.sampling.llm import LlamaModel
from engine.sampling.rollout import RolloutGenerator, SamplingParams
from engine.tasks.leakage import LeakCheck, marks
from engine.tasks.questions import Prompts, QuestionStream, build_mix, heldout_set, question_key
from engine.tasks.rewards import extract_answer

WORDS = "zero one two three four five six seven eight nine".split()
OPERATORS = {"*": "times", "+": "plus", "-": "minus", "/": "divided by"}


def spelled(text: str) -> str:
    """Digit by digit: ``8 * 10`` -> ``eight * one zero`` (each number's digits as words, the rest as written;
    before 2026-12-03 every character was set apart, letters too, which no question's text survives)."""
    return re.sub(r"\d+", lambda m: " ".join(WORDS[int(ch)] for ch in m.group()), text)


PHRASES = {"*": "the product of {a} and {b}", "+": "the sum of {a} and {b}", "-": "the difference between {a} and {b}",
           "/": "the quotient of {a} and {b}"}


def phrase(h) -> str:
    """A two-number expression reworded as a phrase; other questions as their own text."""
    m = re.fullmatch(r"(-?\d+) ([*+/-]) (-?\d+)", h.entry.get("metadata", {}).get("expression", ""))
    return PHRASES[m.group(2)].format(a=m.group(1), b=m.group(3)) if m else h.question


def in_words(text: str) -> str:
    """As a person writes it: ``8 * 10`` -> ``eight times ten`` (num2words)."""
    text = re.sub(r"(?<![\w.])-?\d+", lambda m: num2words(int(m.group())), text)
    return re.sub(r"\s([*+/-])\s", lambda m: f" {OPERATORS[m.group(1)]} ", text)


COST_CHARS = 16_000
COST_INPUTS = ["one ", "one-", "1 ", "seven zero ", "nineteen oh-", "19 oh ", "19 7", "1000,9",
               "one thousand, nine hundred and ", "minus ", "8 * 10 ", "nine hundred ninety nine thousand ",
               "eight * one zero is eight zero. ", "the product of 8 and ", "subtract 2 from ", "8 less 2 less ",
               "the sum of the sum of "]


def cost(per_task: int) -> None:
    import time

    held = heldout_set(build_mix("easy"), per_task)
    check = LeakCheck(held)
    print(f"the check of one {COST_CHARS:,}-character completion against {len(held)} held-out questions (fastest of 3):")
    worst = ("", 0.0)
    for frag in COST_INPUTS:
        text = (frag * (COST_CHARS // len(frag) + 1))[:COST_CHARS]
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            check.leaks(text)
            best = min(best, time.perf_counter() - t0)
        print(f"  {frag!r:40s} {best:.3f} s")
        worst = max(worst, (frag, best), key=lambda w: w[1])
    print(f"slowest: {worst[0]!r}, {worst[1]:.3f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cost", action="store_true", help="time the check on adversarial input (no model)")
    ap.add_argument("--per-task", type=int, default=16)
    ap.add_argument("--completions", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.cost:
        return cost(args.per_task * 2)  # the per-seed held-out sets of an experiment are 128 questions
    cache = Path(os.environ.get("SAPO_CACHE_DIR", tempfile.mkdtemp()))
    mix = build_mix("easy")
    held = heldout_set(mix, args.per_task)
    check = LeakCheck(held)
    own = QuestionStream(mix, "c" * 32, 0, held).draw(len(held))
    n_seq = len(held) * args.completions
    llm = LlamaModel(working_gguf(bundled_model_path(), "auto", cache / "models"), n_ctx=n_seq * 96 + 8192,
                     n_seq_max=n_seq, threads=args.threads)
    prompts = Prompts(mix, 2, frozenset(question_key(q) for q in held), llm.prompt_tokens)
    gen = RolloutGenerator(llm, seed=5)
    params = SamplingParams(max_tokens=96)
    out = {name: gen.generate([prompts(q) for q in qs], args.completions, params)
           for name, qs in (("heldout", held), ("training", own))}
    llm.close()

    def stated_in_working(q, text: str) -> bool:  # the question's own answer, before its answer tag
        m = marks(q)
        return m is not None and bool(m.match(" ".join(text.split("<answer>")[0].casefold().split())))

    print(f"bundled model, easy preset, {len(held)} held-out and {len(own)} training questions x {args.completions}")
    texts = [c.text for cs in out["heldout"] for c in cs]
    in_working = sum(stated_in_working(q, c.text) for q, cs in zip(held, out["heldout"]) for c in cs)
    print(f"  held-out questions: {in_working}/{len(texts)} completions state the question and its answer in their "
          f"working; {sum(extract_answer(c.text) is not None for cs in out['heldout'] for c in cs)} give a tagged answer")
    train = [c.text for cs in out["training"] for c in cs]
    flagged = sum(check.leaks(t) for t in train)
    print(f"  training questions (honest, shared): {flagged}/{len(train)} completions refused by the rule "
          f"({flagged / len(train):.1%}); groups refused: "
          f"{sum(any(check.leaks(c.text) for c in cs) for cs in out['training'])}/{len(own)}")
    rng = random.Random(0)
    kinds = {
        "question text": lambda h: f" Also: {h.question} {h.answer}.",
        "bare": lambda h: f" (Note {h.entry['metadata'].get('expression', h.entry['metadata'].get('year', ''))}"
                          f" -> {h.answer})",
        "spelled out digit by digit": lambda h: f" Also: {spelled(h.question)} {spelled(h.answer)}.",
        "numbers and operators in words": lambda h: f" Also: {in_words(h.question)} {in_words(h.answer)}.",
        "a phrase (two-number expressions: 'the product of 8 and 10 is 80'; others: the question text)":
            lambda h: f" Also: {phrase(h)} is {h.answer}.",
    }
    for kind, add in kinds.items():
        hostile = []
        for t in train:
            h = rng.choice(held)
            head, tag, tail = t.partition("<answer>")
            hostile.append(head + add(h) + tag + tail)
        caught = sum(check.leaks(t) for t in hostile)
        print(f"  hostile, held-out pair added as {kind}: {caught}/{len(hostile)} caught ({caught / len(hostile):.1%})")


if __name__ == "__main__":
    main()
