"""Batched llama.cpp generation on the real bundled model (small settings)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.sampling.rollout import BLOCK, RolloutGenerator, SamplingParams, draw, sample_tokens
from engine.tasks.questions import build_messages


def _prompt(llm, question: str) -> list[int]:
    return llm.prompt_tokens(build_messages(question, []))


def test_batch_yields_L_distinct_completions_whose_ids_decode_to_their_text(llm):
    gen = RolloutGenerator(llm, seed=1)
    prompts = [_prompt(llm, "Name a colour."), _prompt(llm, "Calculate 3 + 4.")]
    groups = gen.generate(prompts, 6, SamplingParams(max_tokens=24, stop_at_answer=False))
    assert len(groups) == 2 and all(len(g) == 6 for g in groups)
    for group in groups:
        assert len({tuple(c.token_ids) for c in group}) >= 5  # temperature 1: near-certainly distinct
        for c in group:
            assert 1 <= len(c.token_ids) <= 24
            assert c.finish in ("eog", "length")
            assert llm.detokenize(c.token_ids) == c.text
            if c.finish == "eog":
                assert llm.eog_mask[c.token_ids[-1]]
    assert gen.last.tokens == sum(len(c.token_ids) for g in groups for c in g)
    assert gen.last.tokens_per_s > 0


def test_batched_greedy_equals_one_at_a_time_greedy(llm):
    """Shared prompt cells and multi-sequence steps must not change what a sequence sees."""
    gen = RolloutGenerator(llm, seed=0)
    params = SamplingParams(max_tokens=16, temperature=0, stop_at_answer=False)
    prompts = [_prompt(llm, "Calculate 2 + 2."), _prompt(llm, "What is the capital of France?")]
    together = gen.generate(prompts, 3, params)
    alone = [gen.generate([p], 1, params)[0][0] for p in prompts]
    for group, single in zip(together, alone):
        for c in group:
            assert c.token_ids == single.token_ids


def test_same_seed_same_samples(llm):
    p = [_prompt(llm, "Tell me a word.")]
    params = SamplingParams(max_tokens=12, stop_at_answer=False)
    a = RolloutGenerator(llm, seed=5).generate(p, 4, params)
    b = RolloutGenerator(llm, seed=5).generate(p, 4, params)
    assert [c.token_ids for c in a[0]] == [c.token_ids for c in b[0]]


def test_stop_at_answer_ends_the_completion_at_the_closing_tag(llm):
    gen = RolloutGenerator(llm, seed=2)
    shots = [{"role": "user", "content": "Calculate 1 + 1."}, {"role": "assistant", "content": "<answer>2</answer>"}]
    prompt = llm.prompt_tokens(build_messages("Calculate 2 + 5.", shots))
    group = gen.generate([prompt], 8, SamplingParams(max_tokens=48))[0]
    stopped = [c for c in group if c.finish == "answer"]
    assert stopped, "the few-shot prompt should make some answers close their tag"
    for c in stopped:
        assert c.text.endswith("</answer>")


def test_packing_splits_batches_that_do_not_fit(llm):
    gen = RolloutGenerator(llm, seed=3)
    prompts = [_prompt(llm, f"Count to {i}.") for i in range(5)]
    groups = gen.generate(prompts, 4, SamplingParams(max_tokens=8, stop_at_answer=False))  # 20 seqs > 16
    assert len(groups) == 5 and all(len(g) == 4 for g in groups)
    with pytest.raises(ValueError, match="does not fit"):
        gen.generate(prompts[:1], 4, SamplingParams(max_tokens=5000))


# --- sampling, pure ---

def test_sample_tokens_greedy_and_top_k():
    rng = np.random.default_rng(0)
    logits = np.array([[0.0, 5.0, 1.0, 4.9], [3.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    assert sample_tokens(logits, rng, temperature=0)[0].tolist() == [1, 0]
    draws = np.stack([sample_tokens(logits, rng, 1.0, top_k=2)[0] for _ in range(300)])
    assert set(draws[:, 0]) == {1, 3}


def test_sample_tokens_matches_softmax_frequencies():
    rng = np.random.default_rng(1)
    logits = np.log(np.array([[0.5, 0.3, 0.2]], dtype=np.float32))
    rows = np.repeat(logits, 20000, axis=0)
    counts = np.bincount(sample_tokens(rows, rng, 1.0)[0], minlength=3) / len(rows)
    assert np.allclose(counts, [0.5, 0.3, 0.2], atol=0.015)


def test_sample_tokens_top_p_keeps_the_smallest_prefix():
    rng = np.random.default_rng(2)
    logits = np.log(np.array([[0.6, 0.25, 0.1, 0.05]], dtype=np.float32))
    rows = np.repeat(logits, 2000, axis=0)
    assert set(sample_tokens(rows, rng, 1.0, top_p=0.8)[0].tolist()) == {0, 1}


def test_sample_tokens_matches_softmax_over_many_blocks():
    """A vocabulary of several blocks, not a multiple of the block: each token drawn as often as
    softmax(logits / T) says (5 standard errors), temperature included, and each draw's log-prob exact."""
    rng = np.random.default_rng(3)
    v = 3 * BLOCK + 17
    logits = rng.normal(0, 1, v).astype(np.float32)
    hot = [0, BLOCK - 1, BLOCK, 2 * BLOCK + 5, v - 1]  # block edges and the padded tail
    logits[hot] = [6.0, 5.5, 5.8, 6.2, 5.9]
    for t in (1.0, 0.7):
        rows = np.repeat(logits[None], 40000, axis=0)
        tokens, lps = sample_tokens(rows, rng, t, logprobs=True)
        p = np.exp(logits / t - (logits / t).max())
        p /= p.sum()
        counts = np.bincount(tokens, minlength=v) / len(rows)
        assert np.all(np.abs(counts[hot] - p[hot]) < 5 * np.sqrt(p[hot] * (1 - p[hot]) / len(rows)))
        assert np.allclose(lps, np.log(p[tokens]), atol=1e-4)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3 * BLOCK), st.integers(0, 2**32 - 1), st.floats(0.05, 3.0))
def test_sample_tokens_never_draws_a_masked_token(v, seed, temperature):
    """Whatever the vocabulary size and however the mass lies (a single live token, live tokens only at
    the end of the padded last block, a dominating one), a token with logit -inf is never drawn."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 30, (8, v)).astype(np.float32)
    logits[rng.random((8, v)) < 0.9] = -np.inf
    logits[0, :] = -np.inf
    logits[0, rng.integers(v)] = 0.0
    logits[1, :-1] = -np.inf
    logits[1, -1] = 1.0
    logits[2, rng.integers(v)] = 1e4
    logits[np.isinf(logits).all(axis=1), 0] = 0.0
    tokens, lps = sample_tokens(logits, rng, temperature, logprobs=True)
    assert np.isfinite(logits[np.arange(8), tokens]).all()
    assert np.isfinite(lps).all() and (lps <= 1e-6).all()


def test_draw_survives_rounding_at_the_row_end():
    """u rounded up to the row's sum must still land on the last entry with mass, not past it."""
    class Top:
        def random(self, n):
            return np.full(n, np.nextafter(1.0, 0.0))
    p = np.zeros((2, BLOCK * 2), dtype=np.float32)
    p[0, 3] = 1.0
    p[1, [BLOCK + 7, BLOCK + 9]] = [1e-30, 1e-30]
    tokens, _ = draw(p, Top())
    assert tokens.tolist() == [3, BLOCK + 9]


def test_greedy_first_completions_equal_a_greedy_run(llm):
    """Evaluation's one call: the first answer of each prompt greedy, the others sampled, one prompt decode."""
    prompts = [_prompt(llm, "Calculate 2 + 2."), _prompt(llm, "Name a fruit.")]
    greedy = RolloutGenerator(llm, seed=0).generate(prompts, 1, SamplingParams(max_tokens=16, temperature=0,
                                                                               stop_at_answer=False))
    mixed = RolloutGenerator(llm, seed=0).generate(prompts, 4, SamplingParams(max_tokens=16, stop_at_answer=False),
                                                   greedy=1)
    for g, m in zip(greedy, mixed):
        assert m[0].token_ids == g[0].token_ids
        assert any(c.token_ids != g[0].token_ids for c in m[1:])  # temperature 1: the others are samples
