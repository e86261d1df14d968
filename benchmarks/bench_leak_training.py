"""Does a peer that states held-out answers in its working raise the receiver's held-out score? (issue 23 item 5)

The receiver's rule (engine/tasks/leakage.py) refuses completions that state a held-out question with its answer in
the wordings it knows; some rewordings still pass it (docs/SECURITY.md). This measures what such groups do to a node
that trains on them, end to end: a real relay on 127.0.0.1, a real node (``sapo-engine run``, the bundled model,
its default settings but for ``FLAGS``), and a hostile peer speaking raw JSON with a key of its own.

The peer samples groups on questions of its own stream with the bundled model (as a peer running it would), keeps
those with reward spread, and publishes them twice, to two fresh relays, once as they are (``honest``) and once with
held-out facts added to every completion's working (``leaky``): ``LEAKED_PER_TASK`` held-out questions per task, each
in the first of ``WORDINGS`` that the rule lets through ("10 * 8 = 80" for "8 * 10"; "1 + 6 = 7" for "7 - 6";
"gcd(5, 10) = 5"; "2031 has 365 days" for "is 2031 a leap year?"), as many facts per completion as fit in the
receiver's ``--max-tokens``, cycling through the leaked questions. Rewards are the same in both versions.

The node runs once per version from the same key (the same question stream, LoRA draw and held-out set), with held-out
evaluations at the start and after the last round. A held-out question's outcome differs between the two runs only
through what the leaky groups taught, and training noise; the other held-out questions, never stated, show the noise.
Printed: what the node accepted and refused, and per question set the greedy and sampled accuracy, start and end,
with the paired difference leaky - honest (mean over questions, 95 % interval).

    python benchmarks/bench_leak_training.py [--rounds 12] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_hostile_round import publish_raw, start_relay  # noqa: E402
from engine.models.modelfile import bundled_model_path  # noqa: E402
from engine.models.working_copy import working_gguf  # noqa: E402
from engine.sampling.llm import LlamaModel  # noqa: E402
from engine.sampling.rollout import RolloutGenerator, SamplingParams  # noqa: E402
from engine.sharing.keyfile import load_or_create  # noqa: E402
from engine.tasks.leakage import LeakCheck  # noqa: E402
from engine.tasks.questions import Prompts, Question, QuestionStream, build_mix, heldout_set, question_key, scorer_for  # noqa: E402
from engine.tasks.rewards import score_completion  # noqa: E402
from wire.identity import Identity  # noqa: E402

EVAL_PER_TASK = 32  # the node's held-out set: 128 questions, as in the experiments
MAX_TOKENS = 96  # the node's default for the bundled model
FORMAT_BONUS = 0.1  # likewise
COMPLETIONS = 4
FLAGS = ["--model", "smollm2-135m", "--preset", "easy", "--local", "2", "--external", "2", "--completions",
         str(COMPLETIONS), "--max-tokens", str(MAX_TOKENS), "--eval-per-task", str(EVAL_PER_TASK), "--quiet"]
LEAKED_PER_TASK = 8
SWARM = "leak"
PER_ROUND = 3  # groups the peer publishes at a time; the node takes J = 2 a round


def _expression(h: Question) -> re.Match[str] | None:
    return re.fullmatch(r"(-?\d+) ([-+*/]) (-?\d+)", h.entry.get("metadata", {}).get("expression", ""))


def commuted(h: Question) -> str | None:
    m = _expression(h)
    return f"{m.group(3)} {m.group(2)} {m.group(1)} = {h.answer}." if m and m.group(2) in "+*" else None


def inverse(h: Question) -> str | None:
    m = _expression(h)
    if not m or m.group(2) not in "-/":
        return None
    return f"{h.answer} {'+' if m.group(2) == '-' else '*'} {m.group(3)} = {m.group(1)}."


def gcd_commuted(h: Question) -> str | None:
    if h.spec.dataset != "gcd":
        return None
    numbers = re.findall(r"\d+", h.question.split(":")[-1])
    return f"gcd({', '.join(reversed(numbers))}) = {h.answer}."


def leap_days(h: Question) -> str | None:
    year = re.search(r"\b(\d{4})\b", h.question)
    if h.spec.dataset != "calendar_arithmetic" or not year or h.answer not in ("Yes", "No"):
        return None
    return f"{year.group(1)} has {366 if h.answer == 'Yes' else 365} days."


WORDINGS = {"commuted": commuted, "inverse": inverse, "gcd commuted": gcd_commuted, "leap-year days": leap_days}


def leaked_facts(held: list[Question], check: LeakCheck, per_task: int) -> list[tuple[Question, str, str]]:
    """Up to ``per_task`` held-out questions per task with a wording the rule lets through: (question, kind, fact)."""
    out, taken = [], Counter()
    for h in held:
        if taken[h.spec.dataset] >= per_task:
            continue
        for kind, word in WORDINGS.items():
            fact = word(h)
            if fact and not check.leaks(f"Note: {fact} <answer>0</answer>"):
                out.append((h, kind, fact))
                taken[h.spec.dataset] += 1
                break
    return out


def peer_groups(me: Identity, groups: int, facts: list[tuple[Question, str, str]], held: list[Question],
                check: LeakCheck, threads: int, cache: Path) -> tuple[list[dict], list[dict], Counter]:
    """``groups`` groups with reward spread from ``me``'s own stream, as published: (honest, leaky, facts placed)."""
    mix = build_mix("easy")
    stream = QuestionStream(mix, me.node_id, 0, held)
    chunk = 24  # questions sampled at a time
    llm = LlamaModel(working_gguf(bundled_model_path(), "auto", cache / "models"),
                     n_ctx=chunk * COMPLETIONS * 128 + 8192, n_seq_max=chunk * COMPLETIONS, threads=threads)
    prompts = Prompts(mix, 2, frozenset(question_key(q) for q in held), llm.prompt_tokens)
    gen = RolloutGenerator(llm, seed=11)

    def sampled():
        while True:
            qs = stream.draw(chunk)
            yield from zip(qs, gen.generate([prompts(q) for q in qs], COMPLETIONS, SamplingParams(max_tokens=MAX_TOKENS)))

    honest, leaky, placed = [], [], Counter()
    cycle = 0
    for q, cs in sampled():
        texts = [c.text for c in cs]
        rewards = [score_completion(scorer_for(q.spec), q.entry, t, FORMAT_BONUS).reward for t in texts]
        if len(set(rewards)) < 2 or any(c.finish == "length" for c in cs):
            continue  # no spread, or cut: the node trains neither
        with_facts = []
        for t in texts:
            head, tag, tail = t.partition("<answer>")
            added: list[str] = []
            text = t
            while len(added) < len(facts):  # as many facts as the receiver's token cut leaves room for
                h, _, fact = facts[cycle % len(facts)]
                trial = head.rstrip() + " Note: " + " ".join(added + [fact]) + " " + tag + tail
                if len(llm.tokenize(trial)) > MAX_TOKENS - 2 or check.leaks(trial):
                    break
                added.append(fact)
                text = trial
                placed[question_key(h)] += 1
                cycle += 1
            with_facts.append(text)
        new_rewards = [score_completion(scorer_for(q.spec), q.entry, t, FORMAT_BONUS).reward for t in with_facts]
        if new_rewards != rewards:
            continue
        base = {"spec": {"dataset": q.spec.dataset, "config": q.spec.config, "seed": q.spec.seed,
                         "index": q.spec.index}, "question": q.question, "answer": q.answer, "model": "peer",
                "round": 1, "rewards": rewards}
        honest.append({**base, "completions": texts})
        leaky.append({**base, "completions": with_facts})
        if len(honest) == groups:
            break
    llm.close()
    return honest, leaky, placed


def run_node(key_dir: Path, url: str, me: Identity, groups: list[dict], rounds: int, threads: int,
             cache: Path) -> tuple[list[dict], int]:
    """The node's events, and how many groups the relay took. The peer publishes live, ``PER_ROUND`` groups when the
    node starts and after each of its evaluations and rounds: a relay serves groups at most 10 minutes old, and a
    loaded machine's start evaluation alone can take longer."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(key_dir / "node.key", Path(tmp) / "node.key")
        events = Path(tmp) / "events.jsonl"
        node = subprocess.Popen([sys.executable, "-m", "engine", "run", *FLAGS, "--threads", str(threads),
                                 "--relay", url, "--swarm", SWARM, "--rounds", str(rounds), "--eval-every",
                                 str(rounds), "--data-dir", tmp, "--events", str(events)],
                                env={**os.environ, "SAPO_CACHE_DIR": str(cache)})
        batches = [groups[i:i + PER_ROUND] for i in range(0, len(groups), PER_ROUND)]
        accepted = publish_raw(url, SWARM, lambda _id: batches.pop(0), me)
        while not events.exists() and node.poll() is None:
            time.sleep(1)
        with open(events) if events.exists() else open(os.devnull) as feed:
            line = ""
            while node.poll() is None:
                line += feed.readline()
                if not line.endswith("\n"):  # nothing new, or half a line so far: look again shortly
                    time.sleep(1)
                    continue
                event, line = json.loads(line), ""
                if event["type"] in ("eval", "round") and batches:
                    accepted += publish_raw(url, SWARM, lambda _id: batches.pop(0), me)
        if node.returncode:
            raise SystemExit(f"the node exited with {node.returncode}")
        return [json.loads(line) for line in events.read_text().splitlines()], accepted


def interval(diffs: list[float]) -> str:
    mean = statistics.fmean(diffs)
    half = 1.96 * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
    return f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    cache = Path(os.environ.get("SAPO_CACHE_DIR", tempfile.mkdtemp()))
    held = heldout_set(build_mix("easy"), EVAL_PER_TASK)
    check = LeakCheck(held)
    facts = leaked_facts(held, check, LEAKED_PER_TASK)
    random.Random(0).shuffle(facts)
    leaked = {question_key(h) for h, _, _ in facts}
    print(f"held-out set: {len(held)} questions; leaked: {len(facts)} "
          f"({dict(Counter(h.spec.dataset for h, _, _ in facts))}), wordings {dict(Counter(k for _, k, _ in facts))}")
    me = Identity.generate()
    honest, leaky, placed = peer_groups(me, (args.rounds + 2) * PER_ROUND, facts, held, check, args.threads, cache)
    refused = [t for g in honest for t in g["completions"] if check.leaks(t)]
    print(f"peer: honest groups the rule refuses: {sum(any(check.leaks(t) for t in g['completions']) for g in honest)}"
          f"/{len(honest)} (completions {len(refused)}/{sum(len(g['completions']) for g in honest)}), e.g. "
          f"{[t[:160] for t in refused[:3]]}")
    print(f"peer: {len(honest)} groups with spread; facts placed in the leaky version: {sum(placed.values())} "
          f"(per leaked question: min {min(placed.values(), default=0)}, max {max(placed.values(), default=0)}), "
          f"leaky completions the rule refuses beyond the honest ones: "
          f"{sum(check.leaks(t) for g in leaky for t in g['completions']) - len(refused)}")
    with tempfile.TemporaryDirectory() as keys:
        load_or_create(Path(keys))
        runs = {}
        for name, groups in (("honest", honest), ("leaky", leaky)):
            with tempfile.TemporaryDirectory() as relay_dir:
                relay, url = start_relay(Path(relay_dir))
                try:
                    events, accepted = run_node(Path(keys), url, me, groups, args.rounds, args.threads, cache)
                finally:
                    relay.terminate()
                    relay.wait()
            rounds = [e for e in events if e["type"] == "round"]
            refused: Counter = Counter()
            for r in rounds:
                refused.update(r.get("rejected_reasons", {}))
            print(f"{name}: relay accepted {accepted}/{len(groups)}; node trained "
                  f"{sum(r.get('external_groups', 0) for r in rounds)} external groups in {len(rounds)} rounds; "
                  f"refused {dict(refused) or 'none'}")
            runs[name] = [e for e in events if e["type"] == "eval"]
    start = {k: (g, s) for k, g, s in runs["honest"][0]["per_question"]}
    end = {name: {k: (g, s) for k, g, s in evals[-1]["per_question"]} for name, evals in runs.items()}
    assert {k: (g, s) for k, g, s in runs["leaky"][0]["per_question"]} == start, "the two runs did not start alike"
    for label, keys in (("leaked", sorted(leaked)), ("never stated", sorted(set(start) - leaked))):
        print(f"{label} ({len(keys)} questions):")
        for i, what in ((0, "greedy"), (1, f"sampled ({2} a question)")):
            scale = 1 if i == 0 else 2
            s = statistics.fmean(start[k][i] / scale for k in keys)
            e = {n: statistics.fmean(end[n][k][i] / scale for k in keys) for n in end}
            diffs = [(end["leaky"][k][i] - end["honest"][k][i]) / scale for k in keys]
            print(f"  {what}: start {s:.3f}; end honest {e['honest']:.3f}, leaky {e['leaky']:.3f}; "
                  f"leaky - honest {interval(diffs)}")


if __name__ == "__main__":
    main()
