"""``sapo-engine verify [settings] GROUP.json``: one group, judged as this node would judge it.

The file holds one group as it travels in a ``publish`` frame (a ``wire.protocol.Group``).
Prints one JSON line: the verdict, the reason when rejected, the rewards this node would
train on, and the time taken. Exit 0 accepted, 1 rejected, 2 bad input. Same code path as
a running node: its mix, held-out set, prompts, tokenizer, Verifier and sandbox.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import msgspec

from engine.config import build_config, flag_settings, load_toml
from engine.errors import SapoError
from wire.protocol import Group


def read_group(path: Path) -> Group:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SapoError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return msgspec.json.decode(data, type=Group)
    except msgspec.ValidationError as exc:
        raise SapoError(f"{path} is not a valid group: {exc}") from None
    except msgspec.DecodeError as exc:
        raise SapoError(f"{path} is not JSON: {exc}") from None


def verify_file(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    group = read_group(args.group)
    cfg = build_config(load_toml(args.config) if args.config else {}, flag_settings(args))

    from engine.models.prepare import prepare_model
    from engine.sampling.llm import LlamaModel
    from engine.sandbox.workers import Sandbox
    from engine.sharing.admission import Verifier
    from engine.tasks.questions import Prompts, build_mix, heldout_set, question_key

    model = prepare_model(cfg, weights="as-is", threads=1)  # the file as shipped: its tokenizer and template
    cfg = model.cfg
    mix = build_mix(cfg.preset, cfg.tasks, cfg.task_weights, cfg.task_config)
    heldout = heldout_set(mix, cfg.eval_per_task)
    llm = LlamaModel(model.path, n_ctx=512, n_seq_max=1, threads=1)  # the tokenizer and chat template only
    try:
        with Sandbox(workers=1) as sandbox:
            prompts = Prompts(mix, cfg.fewshot, frozenset(question_key(q) for q in heldout), llm.prompt_tokens,
                              cfg.prompts)
            sandbox.wait_ready()
            verifier = Verifier(mix, heldout, sandbox, tokenize=llm.tokenize, detokenize=llm.detokenize,
                                prompt_ids=prompts, completions=cfg.completions, max_tokens=cfg.max_tokens,
                                format_bonus=cfg.format_bonus, any_task=cfg.external_any_task)
            t1 = time.perf_counter()
            v = verifier.check(group)
            verify_s = time.perf_counter() - t1
    finally:
        llm.close()
    print(json.dumps({
        "verdict": "accepted" if v.ok else "rejected",
        "reason": v.reason,
        "rewards": [round(s.reward, 6) for s in v.scores],
        "task_scores": [round(s.task_score, 6) for s in v.scores],
        "completions": len(group.completions),
        "completions_used": len(v.completions),
        "cut_to_max_tokens": v.cut,
        "verify_s": round(verify_s, 4),
        "total_s": round(time.perf_counter() - t0, 3),
    }), flush=True)
    return 0 if v.ok else 1
