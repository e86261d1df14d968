"""One GRPO training step: today's against the new default, side by side, on real groups.

Groups are real: questions of the easy and paper presets, prompts as the node builds them
(system prompt + 2 worked examples, the tiny-model default), L completions sampled by
llama.cpp from the bundled model (max 96 tokens, temperature 1), advantages from their
rewards (a group without reward spread gets +1/-1 advantages instead of being dropped: a
step costs the same either way). Variants, each in its own process (peak RSS is per process):
  today:   each completion re-runs its prompt, fp32, checkpointing always (the step before issue 11)
  fp32:    shared prompt per group, fp32, checkpointing only over the memory budget
  default: the engine's automatic dtype (bf16 where the CPU has avx512_bf16/AMX), checkpointing
           only over the memory budget, the update's shared beginnings once, each micro-batch one
           row in one pass (issue 22)
  old:     the default step of an older checkout (``--old``, e.g. a worktree of d9a16b6, the speed issue's
           baseline, from before the engine was grouped by stage, or of 321fbd8, whose micro-batches ran
           their rests and completions in two padded passes), on the same weights as the others
  peft-lora: the default with peft's own LoRA forward instead of ``FusedLoraLinear`` (2026-12-06); the
           same two in one process, alternating: benchmarks/bench_lora_forward.py
  wide:    the default with micro-batches of up to 16 completions instead of 8, so more groups
           of one task share a micro-batch (memory permitting)
  peers-all, peers: a sharing round's update, the second half of the groups from peers: their
           below-average answers run (``onpolicy``: the cost of every update before the trainer
           skipped completions without gradient) or skipped (``drop``, the node's default)
  two-updates: the default with two policy updates on the same groups (``iterations = 2``: the old
           log-probs' pass, then two steps), the cost of docs/results/chain3-it2's probe
All children load the model and run one warm-up step on one group (first-call costs); then they take
turns, one timed step on all groups each, ``--repeats`` times round robin, and each reports its fastest
(only one child computes at a time, and a busy spell of a shared machine falls on every variant alike). Also reported: loss, mean completion
log-prob and gradient norm of the first timed step (fp32 must equal today's), peak RSS.
The memory check (full run only): 8 groups x 4 completions of 64 + 192 random tokens, the
32 x 256 update, for today's step and the default.

    python benchmarks/bench_train.py [--groups 8] [--threads N] [--repeats 3] [--presets easy,paper] [--lengths 4,8]
    python benchmarks/bench_train.py --quick     # one small easy set at L = 4; last line: speedup=X.XX
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = {
    "today": {"shared_prefix": False, "checkpointing": "always", "dtype": "fp32"},
    "fp32": {"shared_prefix": True, "checkpointing": "auto", "dtype": "fp32"},
    "default": {"shared_prefix": True, "checkpointing": "auto", "dtype": "auto"},
    "old": {"shared_prefix": True, "checkpointing": "auto", "dtype": "auto"},  # run with --old's engine
    "peft-lora": {"shared_prefix": True, "checkpointing": "auto", "dtype": "auto", "peft_forward": True},
    "wide": {"shared_prefix": True, "checkpointing": "auto", "dtype": "auto", "micro_batch": 16},
    "peers-all": {"shared_prefix": True, "checkpointing": "auto", "dtype": "auto", "peers": "onpolicy"},
    "peers": {"shared_prefix": True, "checkpointing": "auto", "dtype": "auto", "peers": "drop"},
    "two-updates": {"shared_prefix": True, "checkpointing": "auto", "dtype": "auto", "iterations": 2},
}


def _model_path(cache: Path) -> Path:
    from engine.models.modelfile import bundled_model_path
    from engine.models.working_copy import working_gguf

    return working_gguf(bundled_model_path(), "auto", cache / "models")


def make_groups(preset: str, n_groups: int, completions: int, cache: Path, threads: int, out: Path) -> None:
    """Sample real groups with llama.cpp and write them as JSON (token ids and advantages)."""
    from engine.learning.grpo import group_advantages
    from engine.sampling.llm import LlamaModel
    from engine.tasks.rewards import score_completion
    from engine.sampling.rollout import RolloutGenerator, SamplingParams
    from engine.tasks.questions import QuestionStream, build_messages, build_mix, fewshot_messages, scorer_for

    mix = build_mix(preset)
    questions = QuestionStream(mix, "bench", 0, []).draw(n_groups)
    llm = LlamaModel(_model_path(cache), n_ctx=8192 + completions * 96 * 4, n_seq_max=4 * completions, threads=threads)
    shots = {e.dataset: fewshot_messages(e, 2) for e in mix}
    prompts = [llm.prompt_tokens(build_messages(q.question, shots[q.spec.dataset])) for q in questions]
    outs = RolloutGenerator(llm, seed=0).generate(prompts, completions, SamplingParams(max_tokens=96))
    groups = []
    for q, p, cs in zip(questions, prompts, outs):
        rewards = [score_completion(scorer_for(q.spec), q.entry, c.text, 0.1).reward for c in cs]
        adv = group_advantages(rewards) or [(-1.0) ** i for i in range(len(cs))]
        groups.append({"prompt": p, "completions": [c.token_ids for c in cs], "advantages": adv})
    llm.close()
    out.write_text(json.dumps(groups))


def child(variant: str, groups_file: Path, completions: int, cache: Path, threads: int, micro_batch: int,
          device_setting: str = "cpu", model_path: Path | None = None) -> None:
    import importlib

    import torch

    import engine

    flat = not (Path(engine.__file__).parent / "learning").is_dir()

    def load(name: str) -> object:
        # An --old checkout from before the engine was grouped by stage (d9a16b6: the issues' baseline) keeps
        # every module at engine/<name>.py. (Not a fallback on ImportError: the editable install's finder
        # would hand such a checkout this checkout's engine.models and the like.)
        return importlib.import_module("engine." + name.rsplit(".", 1)[1] if flat else name)

    accel, hardware = load("engine.models.accel"), load("engine.models.hardware")
    choose_device, choose_dtype, memory_budget = accel.choose_device, accel.choose_dtype, accel.memory_budget
    TrainGroup = load("engine.tasks.groups").TrainGroup
    policy, trainer_mod = load("engine.learning.policy"), load("engine.learning.trainer")
    attach_lora, load_base, lora_config = policy.attach_lora, policy.load_base, policy.lora_config
    TrainConfig, Trainer = trainer_mod.TrainConfig, trainer_mod.Trainer
    tune_allocator = hardware.tune_allocator

    tune_allocator()  # as the engine does at start
    torch.set_num_threads(threads)
    v = VARIANTS[variant]
    device = choose_device(device_setting)  # the CPU unless --device says otherwise (scripts/gpu_check.sh: auto)
    dtype = choose_dtype(v["dtype"], device)
    model_path = model_path or _model_path(cache)  # the parent's: every variant trains the same weights
    raw = json.loads(groups_file.read_text())
    half = len(raw) // 2 if "peers" in v else len(raw)  # from here on, peers' groups
    groups = [TrainGroup(g["prompt"], g["completions"][:completions], g["advantages"][:completions], external=k >= half)
              for k, g in enumerate(raw)]
    torch.manual_seed(0)
    model = attach_lora(load_base(model_path, cache / "torch", dtype=dtype, device=device),
                        lora_config(16, 32, 0.0, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                  "down_proj"]))
    if v.get("peft_forward"):  # today's step with peft's own LoRA forward instead of FusedLoraLinear
        policy.set_fused_lora(model, False)
    trainer = Trainer(model, TrainConfig(micro_batch=v.get("micro_batch", micro_batch), checkpointing=v["checkpointing"],
                                         shared_prefix=v["shared_prefix"], external_negatives=v.get("peers", "drop"),
                                         iterations=v.get("iterations", 1),
                                         memory_budget=memory_budget(None, device)))
    trainer.step(groups[:1])  # warm-up: oneDNN kernel selection, allocator, first-call costs
    print(json.dumps({"ready": variant}), flush=True)
    # One timed step per "step" line on stdin: the parent takes turns between variants, so a shared machine's
    # slow and quiet spells fall on all of them alike (see compare()).
    for _ in sys.stdin:
        t0 = time.perf_counter()
        stats = trainer.step(groups)
        if device.type == "cuda":
            torch.cuda.synchronize()
        print(json.dumps({
            "variant": variant, "engine": str(Path(sys.modules["engine"].__file__).parents[1]),
            "device": device.type, "dtype": str(dtype).replace("torch.", ""),
            "step_s": round(time.perf_counter() - t0, 2),
            "loss": stats.loss, "logprob_mean": round(stats.logprob_mean, 6), "grad_norm": round(stats.grad_norm, 6),
            "prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.tokens,
            "completion_tokens_computed": getattr(stats, "tokens_computed", stats.tokens),  # older: all of them
            "checkpointed": f"{stats.checkpointed}/{stats.micro_batches}",
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
            "peak_gpu_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None,
            }), flush=True)


def memory_groups(out: Path) -> None:
    rng = random.Random(0)
    groups = [{"prompt": [rng.randrange(49152) for _ in range(64)],
               "completions": [[rng.randrange(49152) for _ in range(192)] for _ in range(4)],
               "advantages": [rng.uniform(-1, 1) for _ in range(4)]} for _ in range(8)]
    out.write_text(json.dumps(groups))


def compare(args: argparse.Namespace, label: str, groups_file: Path, completions: int,
            variants: tuple[str, ...] = ("today", "fp32", "default")) -> dict[str, dict]:
    """Time each variant's step in turns: all children load and warm up, then step one at a time, round robin.

    Only one child computes at any moment (the others wait on stdin), so they never compete with each other,
    and ``--repeats`` turns spread each variant over the whole run: a fastest-of-N per variant that a busy
    spell on a shared machine cannot hand to one variant alone. Loss, log-prob and grad norm are the first
    step's (the optimizer then moves each child's LoRA the same way); peak RSS is the child's own.
    """
    procs = {}
    for variant in variants:
        cmd = [sys.executable, __file__, "--child", variant, str(groups_file), str(completions), "--cache",
               str(args.cache), "--threads", str(args.threads), "--micro-batch", str(args.micro_batch),
               "--device", args.device, "--model-path", str(_model_path(args.cache))]
        env = dict(os.environ)
        if variant == "old":  # the older checkout's engine comes first on the path
            if args.old is None:
                sys.exit("the variant old needs --old CHECKOUT")
            env["PYTHONPATH"] = os.pathsep.join([str(args.old), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        procs[variant] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    results: dict[str, dict] = {}
    for variant, proc in procs.items():
        if not proc.stdout or not proc.stdout.readline():
            results[variant] = {"variant": variant, "error": "the child failed before its first step"}
    steps: dict[str, list[dict]] = {v: [] for v in procs if v not in results}
    for _ in range(args.repeats):
        for variant in steps:
            proc = procs[variant]
            assert proc.stdin and proc.stdout
            proc.stdin.write("step\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            if line:
                steps[variant].append(json.loads(line))
    for variant, proc in procs.items():
        if proc.stdin:
            proc.stdin.close()
        proc.wait()
        got = steps.get(variant)
        if got:
            results[variant] = {**got[0], "step_s": min(x["step_s"] for x in got),
                                "steps_s": [x["step_s"] for x in got],
                                "peak_rss_gib": max(x["peak_rss_gib"] for x in got)}
        elif variant not in results:
            results[variant] = {"variant": variant, "error": "the child failed during a step"}
        print(f"{label} {json.dumps(results[variant])}", flush=True)
    first = variants[0]
    if "step_s" in results.get(first, {}):
        base = results[first]["step_s"]
        ratios = {v: round(base / r["step_s"], 2) for v, r in results.items() if v != first and "step_s" in r}
        print(f"{label} speedup over {first}: {ratios}", flush=True)
    return results


def main() -> None:
    from engine.paths import default_threads

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one small easy set at L = 4 (about 3 minutes)")
    ap.add_argument("--groups", type=int, default=8, help="groups per step (make run: I + J = 8)")
    ap.add_argument("--threads", type=int, default=default_threads())
    ap.add_argument("--repeats", type=int, default=3, help="timed steps per variant, taken in turns; the fastest counts")
    ap.add_argument("--micro-batch", type=int, default=8, help="completions per micro-batch (engine default, tiny)")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("SAPO_CACHE_DIR") or
                                                      Path(tempfile.gettempdir()) / "sapo-bench-cache"))
    ap.add_argument("--presets", default="easy,paper", help="task presets to draw groups from (full run)")
    ap.add_argument("--lengths", default="4,8", help="group sizes L (full run)")
    ap.add_argument("--no-memory", action="store_true", help="skip the 32 x 256 memory check (full run)")
    ap.add_argument("--variants", default="today,fp32,default",
                    help="variants to time, the first is the base of the ratios (issue 22: old,peft-lora,default,wide "
                         "with --old; peers-all,peers)")
    ap.add_argument("--old", type=Path, help="an older checkout (git worktree) for the variant old")
    ap.add_argument("--device", default="cpu", help="where the step trains: cpu (the default), cuda, mps or auto")
    ap.add_argument("--child", nargs=3, metavar=("VARIANT", "GROUPS_FILE", "L"))
    ap.add_argument("--model-path", type=Path, help="(children) the GGUF every variant loads, from the parent")
    ap.add_argument("--make-groups", nargs=4, metavar=("PRESET", "N", "L", "OUT"))
    args = ap.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), int(args.child[2]), args.cache, args.threads, args.micro_batch,
              args.device, args.model_path)
        return
    if args.make_groups:
        preset, n, L, out = args.make_groups
        make_groups(preset, int(n), int(L), args.cache, args.threads, Path(out))
        return

    work = Path(tempfile.mkdtemp(prefix="bench-train-"))
    presets, lengths = (["easy"], [4]) if args.quick else (args.presets.split(","), [int(x) for x in args.lengths.split(",")])
    if args.quick:
        args.groups, args.repeats = min(args.groups, 2), 2
    print(f"one GRPO step on {args.groups} real groups, bundled model ({_model_path(args.cache).name}), "
          f"LoRA r16 all linear, micro-batch {args.micro_batch}, {args.threads} threads")
    t0 = time.perf_counter()
    for preset in presets:
        path = work / f"{preset}.json"
        subprocess.run([sys.executable, __file__, "--make-groups", preset, str(args.groups), str(max(lengths)),
                        str(path), "--cache", str(args.cache), "--threads", str(args.threads)], check=True)
        raw = json.loads(path.read_text())
        for L in lengths:
            p = sum(len(g["prompt"]) for g in raw) / len(raw)
            c = sum(len(x) for g in raw for x in g["completions"][:L]) / (len(raw) * L)
            label = f"[{preset} L={L} prompt~{p:.0f} completion~{c:.0f}]"
            results = compare(args, label, path, L, tuple(args.variants.split(",")))
    if not args.quick and not args.no_memory:
        path = work / "memory.json"
        memory_groups(path)
        compare(args, "[memory 32 x (64 + 192) random tokens]", path, 4, ("today", "default"))
    print(f"total {time.perf_counter() - t0:.0f} s")
    if args.quick:
        today, new = results.get("today", {}), results.get("default", {})
        if "step_s" not in today or "step_s" not in new:
            sys.exit(f"a variant failed: {today.get('error') or new.get('error')}")
        print(f"speedup={today['step_s'] / new['step_s']:.2f}")


if __name__ == "__main__":
    main()
