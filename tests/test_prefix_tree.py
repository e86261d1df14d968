"""Sampling as a prefix tree: a task's preamble (chat template, system prompt, worked examples) is decoded
once per batch and its KV cells are shared by every question of the task (engine/sampling/rollout.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.sampling.rollout import RolloutGenerator, SamplingParams, common_prefix, prefix_plan
from engine.tasks.questions import Prompts, QuestionStream, build_mix, heldout_set, question_key

QUESTIONS_PER_TASK = 3


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0 and common_prefix([5], [6]) == 0


def test_prefix_plan_shares_the_longest_prefix_and_keeps_a_token_to_decode():
    a = [1, 2, 3, 4, 5]
    b = [1, 2, 3, 9, 9]  # shares 3 with a
    c = [7, 7]  # shares nothing: decoded whole
    d = [1, 2, 3, 9, 9, 8]  # shares 5 with b, 3 with a
    e = list(a)  # the same prompt again: all but its last token shared
    plan = prefix_plan([a, b, c, d, e])
    assert plan == [(None, 0, 0), (0, 3, 1), (None, 0, 0), (1, 5, 2), (0, 4, 1)]
    for q, (src, shared, level) in enumerate(plan):
        if src is not None:
            assert src < q and plan[src][2] < level  # a source is decoded at an earlier level
            assert shared < len([a, b, c, d, e][q])  # its last token is always decoded


def test_prefix_plan_prefers_the_shallower_source_on_ties():
    base, x, y = [1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 3, 6]
    # y shares 3 tokens with base (level 0) and with x (level 1): it takes base, so it decodes at level 1
    assert prefix_plan([base, x, y]) == [(None, 0, 0), (0, 3, 1), (0, 3, 1)]


def _task_prompts(llm, preset: str, per_task: int = QUESTIONS_PER_TASK) -> dict[str, list[list[int]]]:
    mix = build_mix(preset, None, {}, {})
    held = heldout_set(mix, 2)
    prompts = Prompts(mix, 2, frozenset(question_key(q) for q in held), llm.prompt_tokens, "new")
    by_task: dict[str, list[list[int]]] = {}
    for q in QuestionStream(mix, "prefix-tree-test", 0, held).draw(60 * len(mix)):
        got = by_task.setdefault(q.spec.dataset, [])
        if len(got) < per_task:
            got.append(prompts(q))
    assert set(by_task) == {e.dataset for e in mix}
    return by_task


def _check_preamble_shared_once(llm, preset: str) -> float:
    """Every task's second and third questions decode little more than their own words; returns the
    share of prompt tokens a mixed batch of all tasks actually computes."""
    by_task = _task_prompts(llm, preset)
    for task, prompts in by_task.items():
        plan = prefix_plan(prompts)
        for p, (src, shared, _) in list(zip(prompts, plan))[1:]:
            computed = len(p) - shared
            # what is left is the question and the template's few tokens around it
            assert src is not None and computed <= len(p) // 2 + 8, (task, len(p), computed)
    batch = [p for prompts in zip(*by_task.values()) for p in prompts]  # tasks interleaved, as rounds draw
    plan = prefix_plan(batch)
    return sum(len(p) - s for p, (_, s, _) in zip(batch, plan)) / sum(len(p) for p in batch)


@pytest.mark.parametrize("preset", ["easy", "paper"])
def test_smollm2_decodes_each_tasks_preamble_once(llm, preset):
    share = _check_preamble_shared_once(llm, preset)
    assert share < 0.6, share


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["easy", "paper"])
def test_gemma3_decodes_each_tasks_preamble_once(gemma_gguf: Path, preset):
    from engine.sampling.llm import LlamaModel

    gemma = LlamaModel(gemma_gguf, n_ctx=1024, n_seq_max=2, threads=1)
    try:
        share = _check_preamble_shared_once(gemma, preset)
    finally:
        gemma.close()
    assert share < 0.6, share


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def _deviation(reference: list[np.ndarray], got: list[np.ndarray]) -> tuple[float, int]:
    """Largest log-prob difference over each reference's 20 likeliest tokens, and how many top-1s agree."""
    worst, agree = 0.0, 0
    for a, b in zip(reference, got):
        la, lb = _log_softmax(a), _log_softmax(b)
        top = np.argsort(-la)[:20]
        worst = max(worst, float(np.abs(la[top] - lb[top]).max()))
        agree += int(a.argmax() == b.argmax())
    return worst, agree


def test_shared_prefixes_give_the_log_probs_of_decoding_alone(llm):
    """Against each prompt decoded alone in an empty cache, the tree is about as close as today's whole-prompt
    decoding in a shared cache is: llama.cpp's float noise (where the KV cells sit, the batch's shape) is the
    measure, and on a 135M model it is not small."""
    by_task = _task_prompts(llm, "easy", 2)
    prompts = [p for ps in by_task.values() for p in ps][:8]
    alone = []
    for p in prompts:
        llm.clear()
        alone.append(llm.decode_prompt(p, 0))
    llm.clear()
    whole = RolloutGenerator(llm, share_prefixes=False)._decode_prompts(prompts, 2)
    llm.clear()
    tree = RolloutGenerator(llm, share_prefixes=True)._decode_prompts(prompts, 2)
    llm.clear()
    whole_dev, whole_agree = _deviation(alone, whole)
    tree_dev, tree_agree = _deviation(alone, tree)
    # Seen here: today's path 0.27 nats off and 2 of 8 top-1s flipped (near-ties of a 135M model); the tree 0.43, 2 of 8.
    assert tree_dev <= max(0.6, 2 * whole_dev), (tree_dev, whole_dev)
    assert tree_agree >= whole_agree - 1 and tree_agree >= len(prompts) // 2, (tree_agree, whole_agree)


def test_a_round_with_shared_prefixes_counts_what_it_computed(llm):
    by_task = _task_prompts(llm, "easy", 2)
    prompts = [p for ps in zip(*by_task.values()) for p in ps]
    params = SamplingParams(max_tokens=8, stop_at_answer=False)
    gen = RolloutGenerator(llm, seed=3)
    groups = gen.generate(prompts, 2, params)
    assert len(groups) == len(prompts) and all(len(g) == 2 and len(g[0].token_ids) == 8 for g in groups)
    assert gen.last.prompt_tokens == sum(len(p) for p in prompts)
    assert 0 < gen.last.prompt_tokens_computed < 0.6 * gen.last.prompt_tokens
    whole = RolloutGenerator(llm, seed=3, share_prefixes=False)
    whole.generate(prompts, 2, params)
    assert whole.last.prompt_tokens_computed == whole.last.prompt_tokens


def test_greedy_completions_are_todays_with_shared_prefixes(llm):
    by_task = _task_prompts(llm, "easy", 2)
    prompts = [p for ps in zip(*by_task.values()) for p in ps]
    params = SamplingParams(max_tokens=24, temperature=0)
    tree = RolloutGenerator(llm).generate(prompts, 1, params)
    whole = RolloutGenerator(llm, share_prefixes=False).generate(prompts, 1, params)
    same = sum(t[0].token_ids == w[0].token_ids for t, w in zip(tree, whole))
    assert same >= len(prompts) - 1, (same, len(prompts))  # a near-tie may flip one argmax, as batching can today
