"""What a round costs under each flood of issue 23, against a normal round, in one run.

A node on the bundled model (``--tasks basic_arithmetic,propositional_logic,intermediate_integration --local 2
--external 2 --completions 4 --max-tokens 64 --external-any-task --external-selection top``: it asks the relay for
8 candidates a round) runs ``--rounds`` rounds against a relay on 127.0.0.1, each kind in a swarm of its own:

- normal: an empty pool (the node makes all its groups itself);
- logic: 16 propositional_logic groups whose answers name 16-18 variables (2**18-row truth tables);
- integration: 16 intermediate_integration groups whose answers nest calls 8 deep or multiply six functions to
  the 64th power (sympy's simplify: seconds to minutes each);
- settings: 16 groups of task settings inside ANY_TASK_CAPS that loop (base_conversion with one base,
  calendar_arithmetic with offset 0) or are the slowest to generate (bf at difficulty 2, its cap), interleaved.

Every flood group comes from one hostile key, 8 completions each, rewards with spread. Prints each kind's median
round time, its ratio to normal, and the refusals by reason.

    python benchmarks/bench_flood_round.py [--rounds 2] [--threads 1]
    python benchmarks/bench_flood_round.py --verify-only 3   # the sandbox's part alone, no model: low noise
"""

from __future__ import annotations

import argparse
import os
import statistics
import string
import sys
import tempfile
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_hostile_round import one_run  # noqa: E402
from benchmarks.bench_hostile_round import publish_raw as flood  # noqa: E402
from benchmarks.bench_hostile_round import start_relay  # noqa: E402
from engine.tasks import hashseed  # noqa: E402
from engine.tasks.questions import QuestionStream, build_mix, regenerate  # noqa: E402
from wire.authorship import MAIN_LANE, stream_seed  # noqa: E402
from wire import protocol as p  # noqa: E402

TASKS = "basic_arithmetic,propositional_logic,intermediate_integration"
FLAGS = ["--model", "smollm2-135m", "--tasks", TASKS, "--local", "2", "--external", "2", "--completions", "4",
         "--max-tokens", "64", "--eval-every", "0", "--eval-per-task", "4", "--external-any-task",
         "--external-selection", "top", "--quiet"]
GROUPS = 16


def _group(spec: p.TaskSpec, question: str, answer: str, answers: list[str]) -> dict:
    s = {"dataset": spec.dataset, "config": spec.config, "seed": spec.seed, "index": spec.index}
    return {"spec": s, "question": question, "answer": answer, "model": "evil", "round": 1,
            "completions": [f"<answer>{a}</answer>" for a in answers], "rewards": [1.0, 0.0] * (len(answers) // 2)}


def _drawn(task: str, n: int, node_id: str) -> list:
    """``node_id``'s own questions (seed 0, main lane: a group without ``origin``), as a relay and a receiver
    check them (``wire.protocol.authored_by``)."""
    return QuestionStream(build_mix("easy", tasks=[task]), node_id, 0, []).draw(n)


def flood_groups(kind: str, node_id: str) -> list[dict]:
    if kind == "logic":
        out = []
        for i, q in enumerate(_drawn("propositional_logic", GROUPS, node_id)):
            answers = ["∨".join(string.ascii_lowercase[j % 3:j % 3 + 16 + j % 3]) for j in range(8)]
            out.append(_group(q.spec, q.question, q.answer, answers))
        return out
    if kind == "integration":
        out = []
        for q in _drawn("intermediate_integration", GROUPS, node_id):
            v = q.entry["metadata"]["variable"]
            nested = [f"{f}(" * 8 + v + ")" * 8 for f in ("exp", "sin", "tan", "cosh")]
            products = [f"{v}**{k}*" + "*".join(f"{f}({v})**64" for f in ("sin", "cos", "tan", "exp", "log"))
                        for k in (61, 62, 63, 64)]
            out.append(_group(q.spec, q.question, q.answer, [a for pair in zip(nested, products) for a in pair]))
        return out
    if kind == "settings":
        kinds = [("bf", {"difficulty": 2}), ("base_conversion", {"min_base": 18, "max_base": 18}),
                 ("bf", {"difficulty": 2}), ("calendar_arithmetic", {"offset_upper_bound": 0})]
        specs = [p.TaskSpec(dataset=d, config=c, seed=stream_seed(node_id, 0, MAIN_LANE, d, c), index=i)
                 for i, (d, c) in ((i, kinds[i % 4]) for i in range(GROUPS))]
        out = []
        for i, spec in enumerate(specs):  # (distinct questions: the relay refuses a question it holds already)
            real = regenerate(spec) if spec.dataset == "bf" else None
            out.append(_group(spec, real.question if real else f"question {i}", real.answer if real else "?",
                              ["1", "2"] * 4))
        return out
    raise ValueError(kind)


def honest_groups(node_id: str) -> list[dict]:
    out = []
    for task in TASKS.split(","):
        for q in _drawn(task, 3, node_id):
            right = q.answer or "x"
            out.append(_group(q.spec, q.question, q.answer, [right, "0"] * 4))
    return out[:8]


def verify_only(repeats: int) -> None:
    """The sandbox's part alone, without a model: one round's 8 candidates from one sender through the node's
    Verifier (2 workers, the node's mix, any task), honest or a flood, with the per-sender budget and without."""
    import time

    from engine.sandbox.workers import Sandbox
    from engine.sharing.admission import Verifier

    mix = build_mix("easy", tasks=TASKS.split(","))
    sender = "5e" * 16
    kinds = {"normal": honest_groups(sender), **{k: flood_groups(k, sender) for k in ("logic", "integration", "settings")}}
    with Sandbox(workers=2) as sandbox:
        sandbox.wait_ready()
        for budget in (float("inf"), None):
            label = "no sender budget" if budget else "sender budget"
            kw = {"sender_budget_s": budget} if budget else {}
            verifier = Verifier(mix, [], sandbox, tokenize=lambda t: list(t.encode()), detokenize=lambda i: "",
                                prompt_ids=lambda q: [0], completions=4, max_tokens=4096, format_bonus=0.0,
                                any_task=True, **kw)
            for kind, groups in kinds.items():
                batch = [msgspec.convert(g, p.Group) for g in groups[:8]]
                times, reasons = [], {}
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    verdicts = verifier.check_many(batch, [sender] * len(batch))
                    times.append(time.perf_counter() - t0)
                    for v in verdicts:
                        reasons[v.reason or "ok"] = reasons.get(v.reason or "ok", 0) + 1
                print(f"{label:17s} {kind:12s} median {statistics.median(times):6.2f} s  max {max(times):6.2f} s  "
                      f"{reasons}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--kinds", default="normal,logic,integration,settings")
    ap.add_argument("--verify-only", type=int, default=0, metavar="REPEATS",
                    help="time only the sandbox's verification of one round's candidates, REPEATS times per kind")
    args = ap.parse_args()
    if not hashseed.fixed():  # question texts as the node words them: the same hash seed
        os.execve(sys.executable, [sys.executable, *sys.argv], hashseed.env())
    if args.verify_only:
        verify_only(args.verify_only)
        return
    cache = Path(os.environ.get("SAPO_CACHE_DIR", tempfile.mkdtemp()))
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as relay_dir:
        relay, url = start_relay(Path(relay_dir))
        try:
            for kind in args.kinds.split(","):
                if kind != "normal":
                    print(f"{kind}: published {flood(url, kind, lambda node_id: flood_groups(kind, node_id))} groups",
                          flush=True)
                rounds = one_run(url, kind, args.rounds, args.threads, cache, FLAGS)
                times[kind] = statistics.median(r["round_s"] for r in rounds)
                print(kind, [(r["round_s"], r["score_s"], r["external_groups"], r["rejected_reasons"]) for r in rounds],
                      flush=True)
        finally:
            relay.terminate()
    base = times.get("normal")
    for kind, t in times.items():
        print(f"{kind:12s} median round {t:6.2f} s" + (f"  {t / base:.2f}x normal" if base else ""))


if __name__ == "__main__":
    main()
