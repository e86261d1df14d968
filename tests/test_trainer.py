"""The GRPO trainer on a tiny real llama model (random weights, real torch and peft), and on the bundled model."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from engine.tasks.groups import TrainGroup, TrainSequence
from engine.learning.policy import FusedLoraLinear, attach_lora, lora_config, set_fused_lora
from engine.learning.packing import MIN_SHARED, plan_prefixes, prompt_tree, tree_batch, tree_tokens
from engine.learning.trainer import TrainConfig, Trainer, _clean, _slice, micro_batches, target_logprobs
from engine.learning.memory import BatchShape, Dims, MemoryPlan, SavedBytes, estimate_bytes

EXACT = 1e-5  # relative, fp32
PREAMBLE = MIN_SHARED  # tokens of each task's preamble in ``preamble_groups``: long enough to be run apart


def tiny_policy(seed: int = 0, attn: str | None = None, bf16: bool = False, arch: str = "llama"):
    from transformers import AutoConfig, AutoModelForCausalLM

    from engine.learning.policy import bf16_linears

    torch.manual_seed(seed)
    extra = {}
    if arch == "gemma3_text":  # a window of 4 positions, so that sliding layers really see less than full ones
        extra = {"sliding_window": 4, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}
    cfg = AutoConfig.for_model(arch, vocab_size=97, hidden_size=32, intermediate_size=64,
                               num_hidden_layers=3 if extra else 2, num_attention_heads=4, num_key_value_heads=2,
                               head_dim=8, **extra)
    if attn:
        cfg._attn_implementation = attn
    base = AutoModelForCausalLM.from_config(cfg)
    for p in base.parameters():
        p.requires_grad_(False)
    if bf16:
        bf16_linears(base)
    model = attach_lora(base, lora_config(4, 8, 0.0, ["q_proj", "k_proj", "v_proj", "o_proj"]))
    with torch.no_grad():  # non-zero B so that every LoRA tensor gets a gradient
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    return model


def groups(seed: int = 1) -> list[TrainGroup]:
    """Four groups: prompts of different lengths, 2-4 completions of 1-8 tokens, one empty completion."""
    g = torch.Generator().manual_seed(seed)

    def ids(lo: int, hi: int) -> list[int]:
        return torch.randint(0, 97, (int(torch.randint(lo, hi, (1,), generator=g)),), generator=g).tolist()

    out = []
    for n in (4, 3, 2, 4):
        comps = [ids(1, 9) for _ in range(n)]
        adv = torch.randn(n, generator=g).tolist()
        out.append(TrainGroup(ids(3, 12), comps, adv))
    out[1].completions[2].clear()  # an empty completion (an external answer that tokenized to nothing)
    return out


def preamble_groups(seed: int = 2) -> list[TrainGroup]:
    """Five groups whose prompts begin alike, as a node's do: a common root (chat template and system
    prompt) of 9 tokens, then one of two task preambles (PREAMBLE tokens), then a 1-5 token question."""
    g = torch.Generator().manual_seed(seed)

    def ids(lo: int, hi: int) -> list[int]:
        return torch.randint(0, 97, (int(torch.randint(lo, hi, (1,), generator=g)),), generator=g).tolist()

    root = ids(9, 10)
    tasks = [root + list(range(1, 1 + PREAMBLE)), root + list(range(20, 20 + PREAMBLE))]
    out = []
    for k, n in enumerate((4, 3, 4, 2, 4)):
        out.append(TrainGroup(tasks[k % 2] + ids(1, 6), [ids(1, 9) for _ in range(n)],
                              torch.randn(n, generator=g).tolist()))
    return out


def run(model, groups, **cfg) -> tuple[object, dict[str, torch.Tensor]]:
    """One step with SGD and no clipping; returns stats and each LoRA tensor's gradient."""
    trainer = Trainer(model, TrainConfig(**{"optimizer": "sgd", "learning_rate": 0.0, "grad_clip": 1e9} | cfg))
    stats = trainer.step(groups)
    return stats, {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())  # of detached tensors


def assert_same_grads(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], tol: float = EXACT,
                      per_tensor: float | None = None) -> None:
    """All LoRA gradients, as one vector, within ``tol`` relative; each tensor within ``per_tensor`` (default tol)."""
    assert got.keys() == want.keys()
    assert all(want[n].norm() > 0 for n in want)
    whole = rel(torch.cat([got[n].flatten() for n in want]), torch.cat([want[n].flatten() for n in want]))
    assert whole <= tol, whole
    worst = max(rel(got[n], want[n]) for n in want)
    assert worst <= (per_tensor or tol), worst


# --- pure pieces ---

def test_chunked_logprobs_equal_full_log_softmax():
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=False)
    h, t = torch.randn(37, 16), torch.randint(0, 50, (37,))
    full = torch.log_softmax(head(h), -1).gather(-1, t[:, None]).squeeze(-1)
    assert torch.allclose(target_logprobs(head, h, t, chunk=8), full, atol=1e-6)


def test_target_logprobs_gradient_formed_in_forward_equals_autograd():
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=False)
    h = torch.randn(37, 16, requires_grad=True)
    t, g = torch.randint(0, 50, (37,)), torch.randn(37)
    (torch.log_softmax(head(h), -1).gather(-1, t[:, None]).squeeze(-1) * g).sum().backward()
    want, h.grad, head.weight.grad = h.grad, None, None
    (target_logprobs(head, h, t, chunk=8) * g).sum().backward()
    assert rel(h.grad, want) < 1e-6
    assert head.weight.grad is None  # the head is frozen: no gradient flows into it
    hb = h.detach().bfloat16().requires_grad_()  # bf16 hidden states: fp32 maths, gradient back in bf16
    target_logprobs(head, hb, t).sum().backward()
    assert hb.grad.dtype == torch.bfloat16


def distinct_beginnings(prompts) -> int:
    """An independent count of what a prompt tree must run: the distinct beginnings p[:k], k >= 1."""
    return len({tuple(p[:k]) for p in prompts for k in range(1, len(p) + 1)})


def test_the_prompt_tree_runs_each_shared_beginning_once():
    root, task_a, task_b = [100, 101, 102], [1, 2], [50, 51, 52]
    prompts = [root + task_a + [1], root + task_b + [2], root + task_a + [3, 3], root + task_b + [4], root + [9, 9]]
    segments, ends = prompt_tree(prompts)
    assert [s.tokens for s in segments[:1]] == [tuple(root)] and segments[0].parent == -1
    # the root, then the two preambles and the fifth prompt's rest under it, then each question
    assert sorted(s.tokens for s in segments if s.parent == 0) == [(1, 2), (9, 9), (50, 51, 52)]
    assert sum(len(s.tokens) for s in segments) == tree_tokens(prompts) == distinct_beginnings(prompts) == 15
    for p, e in zip(prompts, ends):  # each prompt is its segments from the root down, at their positions
        chain = []
        while e >= 0:
            chain[:0] = segments[e].tokens
            assert segments[e].start == (segments[segments[e].parent].start + len(segments[segments[e].parent].tokens)
                                         if segments[e].parent >= 0 else 0)
            e = segments[e].parent
        assert chain == p
    # a repeated prompt (a split group's parts) ends in one segment; a prompt that begins another ends at the split
    segments, ends = prompt_tree([[7, 8, 9], [7, 8, 9], [7, 8], [5]])
    assert ends[0] == ends[1] and segments[ends[2]].tokens == (7, 8) and segments[ends[0]].tokens == (9,)
    assert tree_tokens([[7, 8, 9], [7, 8, 9], [7, 8], [5]]) == 4


@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=1, max_size=8))
def test_any_prompts_make_a_tree_of_their_distinct_beginnings(prompts):
    segments, ends = prompt_tree(prompts)
    assert tree_tokens(prompts) == distinct_beginnings(prompts)
    assert all(s.parent < k for k, s in enumerate(segments))  # parents first
    for p, e in zip(prompts, ends):
        chain = []
        while e >= 0:
            chain[:0] = segments[e].tokens
            e = segments[e].parent
        assert chain == p


def test_a_tree_batch_is_one_row_whose_targets_come_from_the_position_before():
    b = tree_batch([[5, 6, 7], [5, 8]], [[1, 2], [3], [4, 4, 4]], rows=[0, 0, 1])
    # segments: [5], [6, 7], [8], then the completions [1, 2], [3], [4, 4, 4]
    assert b.ids.tolist() == [[5, 6, 7, 8, 1, 2, 3, 4, 4, 4]]
    assert b.positions.tolist() == [[0, 1, 2, 1, 3, 4, 3, 2, 3, 4]]  # each token at its place in its sequence
    assert b.targets.tolist() == [1, 2, 3, 4, 4, 4]
    assert b.source.tolist() == [2, 4, 2, 3, 7, 8]  # a first token from its prompt's last, then its own
    assert b.prompt_tokens == 4
    m = b.mask()[0, 0].int().tolist()
    assert m[2] == [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]  # 7 sees 5, 6 and itself
    assert m[3] == [1, 0, 0, 1, 0, 0, 0, 0, 0, 0]  # 8 sees 5, not the other prompt's 6, 7
    assert m[5] == [1, 1, 1, 0, 1, 1, 0, 0, 0, 0]  # completion 0's second token: its prompt and its own
    assert m[6] == [1, 1, 1, 0, 0, 0, 1, 0, 0, 0]  # completion 1 never sees completion 0
    assert m[9] == [1, 0, 0, 1, 0, 0, 0, 1, 1, 1]


def test_a_row_after_its_beginnings_sees_only_its_own():
    """Prompts whose first 3 (family 1) or 2 (family 0) tokens ran before: those keys come first, each
    token sees its prompt's beginning, and positions go on from the beginning's end."""
    b = tree_batch([[10, 11, 12, 5], [10, 11, 7, 7]], [[1], [2, 2]], rows=[0, 1], cuts=[3, 2], families=[1, 0])
    assert b.beginnings == (1, 0) and b.lengths == (3, 2)
    assert b.ids.tolist() == [[5, 7, 7, 1, 2, 2]] and b.positions.tolist() == [[3, 2, 3, 4, 4, 5]]
    assert b.key_positions().tolist() == [[0, 1, 2, 0, 1, 3, 2, 3, 4, 4, 5]]
    m = b.mask()[0, 0].int().tolist()  # keys: family 1's 3, family 0's 2, then the row's 6
    assert m[0] == [1, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0]
    assert m[2] == [0, 0, 0, 1, 1, 0, 1, 1, 0, 0, 0]
    assert m[5] == [0, 0, 0, 1, 1, 0, 1, 1, 0, 1, 1]
    assert b.source.tolist() == [0, 2, 4]
    # rests after different beginnings never share a segment, even when they begin alike
    segments, _ = prompt_tree([[7, 8], [7, 9]], keys=[1, 2], offsets=[10, 4])
    assert len(segments) == 2 and [s.start for s in segments] == [10, 4]


def test_the_plan_runs_the_root_and_each_tasks_preamble_once():
    root = list(range(100, 100 + MIN_SHARED))
    task_a, task_b = root + list(range(MIN_SHARED)), root + list(range(50, 50 + MIN_SHARED))
    prompts = [task_a + [1], task_b + [2], task_a + [3, 3], task_b + [4], root + [9, 9]]
    plan = plan_prefixes(prompts)
    assert plan.families[0] == tuple(root)
    assert set(plan.families[1:]) == {tuple(task_a), tuple(task_b)}
    assert [plan.prefix_len(p) for p in prompts] == [len(task_a), len(task_b), len(task_a), len(task_b), len(root)]
    assert plan.tokens == len(root) + 2 * MIN_SHARED  # the root once, each preamble's own part once
    # every prompt keeps a token of its own; a repeated prompt (a split group) shares all but its last
    same = plan_prefixes([task_a + [1], task_a + [1]])
    assert same.prefix_len(task_a + [1]) == len(task_a)
    assert plan_prefixes([root + [1]]).tokens == 0  # one prompt: nothing to share
    short = [list(range(MIN_SHARED - 1)) + [1], list(range(MIN_SHARED - 1)) + [2]]
    assert plan_prefixes(short).tokens == 0  # too short to pay for a pass of its own


def test_micro_batches_never_split_a_group():
    gs = groups()
    assert [len(b) for b in micro_batches(gs, 6)] == [1, 2, 1]  # 4 | 3 + 2 | 4 completions
    assert [len(b) for b in micro_batches(gs, 1)] == [1, 1, 1, 1]  # a group larger than the size stays whole
    assert [len(b) for b in micro_batches(gs, 100)] == [4]
    seqs = [s for g in gs for s in g.sequences()]
    assert [len(b) for b in micro_batches(seqs, 5)] == [5, 5, 3]


def test_memory_plan_checkpoints_over_budget_and_learns_from_measurement():
    dims = Dims(layers=2, hidden=8, ffn=16, heads=2, kv_heads=1, head_dim=4)
    shape = BatchShape(query_tokens=100, attention_cells=300)
    raw = estimate_bytes(dims, shape, 4)
    plan = MemoryPlan(dims, 4, budget_bytes=raw + 1)
    assert not plan.checkpoint(shape)
    plan.observe(shape, 2 * raw)  # really kept twice the estimate
    assert plan.checkpoint(shape) and plan.estimate(shape) == 2 * raw
    plan.observe(shape, raw // 2)  # a smaller measurement never lowers the margin
    assert plan.scale == 2.0
    assert MemoryPlan(dims, 4, 0, "never").checkpoint(shape) is False
    assert MemoryPlan(dims, 4, 1 << 40, "always").checkpoint(shape) is True
    with pytest.raises(ValueError, match="checkpointing"):
        MemoryPlan(dims, 4, 0, "sometimes")


def test_saved_bytes_counts_activations_once_and_not_parameters():
    w = torch.nn.Parameter(torch.randn(64, 64))
    x = torch.randn(10, 64, requires_grad=True)
    with SavedBytes([w]) as meter:
        y = x @ w  # saves x and w
        z = y.tanh()  # saves its output
        (z * z).sum()  # saves z (already counted)
    assert meter.bytes == (10 * 64 + 10 * 64) * 4


# --- the trainer on a tiny llama ---

def test_step_moves_lora_but_never_the_base():
    model = tiny_policy()
    base = {n: p.clone() for n, p in model.named_parameters() if not p.requires_grad}
    lora = {n: p.clone() for n, p in model.named_parameters() if p.requires_grad}
    stats = Trainer(model, TrainConfig(learning_rate=1e-2, micro_batch=2)).step(groups())
    assert stats.tokens == sum(len(c) for g in groups() for c in g.completions)
    assert stats.sequences == 12  # 13 completions, one empty
    assert stats.prompt_tokens == sum(len(g.prompt_ids) for g in groups())  # each prompt once
    for n, p in model.named_parameters():
        if n in base:
            assert torch.equal(p, base[n]), n
    assert all(not torch.equal(p, lora[n]) for n, p in model.named_parameters() if n in lora)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("micro", [1, 5, 100])
@pytest.mark.parametrize("ckpt", ["never", "always"])
def test_shared_prefix_equals_per_sequence(attn, micro, ckpt):
    """Same loss, same LoRA gradients as every completion with its own copy of the prompt."""
    ref_stats, ref = run(tiny_policy(attn=attn), groups(), micro_batch=1, shared_prefix=False, checkpointing="never")
    stats, got = run(tiny_policy(attn=attn), groups(), micro_batch=micro, checkpointing=ckpt)
    assert stats.loss == pytest.approx(ref_stats.loss, rel=EXACT)
    assert stats.tokens == ref_stats.tokens and stats.sequences == ref_stats.sequences
    assert stats.prompt_tokens < ref_stats.prompt_tokens
    assert_same_grads(got, ref)


@pytest.mark.parametrize("arch", ["qwen3", "gemma3_text"])
def test_shared_prefix_equals_per_sequence_on_other_architectures(arch):
    """Qwen 3 (q/k norms) and Gemma 3 (sliding-window layers, here a window shorter than the prompts)."""
    ref_stats, ref = run(tiny_policy(arch=arch), groups(), micro_batch=1, shared_prefix=False)
    stats, got = run(tiny_policy(arch=arch), groups(), micro_batch=5)
    assert stats.loss == pytest.approx(ref_stats.loss, rel=EXACT)
    assert stats.logprob_mean == pytest.approx(ref_stats.logprob_mean, rel=EXACT)
    assert_same_grads(got, ref)


@pytest.mark.parametrize("arch, attn", [("llama", "sdpa"), ("llama", "eager"), ("qwen3", None),
                                        ("gemma3_text", None)])
@pytest.mark.parametrize("micro, ckpt", [(100, "never"), (8, "always"), (6, "never")])
def test_a_common_beginning_run_once_changes_nothing(arch, attn, micro, ckpt):
    """Prompts that begin alike (issue 22): the root all five share and each task's preamble run once per
    update, whatever the micro-batches, with the loss, log-probs and LoRA gradients of every completion
    run with its own whole prompt. Gemma's window (4) is shorter than any prompt."""
    ref_stats, ref = run(tiny_policy(arch=arch, attn=attn), preamble_groups(), micro_batch=1, shared_prefix=False,
                         checkpointing="never")
    stats, got = run(tiny_policy(arch=arch, attn=attn), preamble_groups(), micro_batch=micro, checkpointing=ckpt)
    assert stats.loss == pytest.approx(ref_stats.loss, rel=EXACT)
    assert stats.logprob_mean == pytest.approx(ref_stats.logprob_mean, rel=EXACT)
    assert_same_grads(got, ref)
    once_per_group = sum(len(g.prompt_ids) for g in preamble_groups())
    # the 9-token root once, each task's preamble once, each question once (or less, where two begin alike)
    rests = sum(len(g.prompt_ids) - 9 - PREAMBLE for g in preamble_groups())
    prompts = [g.prompt_ids for g in preamble_groups()]
    assert stats.prompt_tokens <= rests + 9 + 2 * PREAMBLE < once_per_group
    if micro == 100:  # one micro-batch: each distinct beginning once
        assert stats.prompt_tokens == distinct_beginnings(prompts)


def test_a_sliding_window_changes_the_result():
    """The test above could not fail if the window never mattered: it does, for these prompts."""
    _, narrow = run(tiny_policy(arch="gemma3_text"), groups())
    wide_model = tiny_policy(arch="gemma3_text")
    wide_model.get_base_model().config.sliding_window = 1000
    _, wide = run(wide_model, groups())
    assert max(rel(narrow[n], wide[n]) for n in wide) > 1e-2


def test_shared_prefix_equals_per_sequence_over_iterations():
    """iterations > 1: old log-probs, clipping and three real updates agree too."""
    results = []
    for shared in (False, True):
        model = tiny_policy()
        stats = Trainer(model, TrainConfig(optimizer="sgd", learning_rate=2.0, micro_batch=3, iterations=3,
                                           grad_clip=1e9, shared_prefix=shared)).step(groups())
        results.append((stats, {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}))
    (ref_stats, ref), (stats, got) = results
    assert ref_stats.clip_low_frac + ref_stats.clip_high_frac > 0  # the updates were large enough to clip
    assert (stats.clip_low_frac, stats.clip_high_frac) == (ref_stats.clip_low_frac, ref_stats.clip_high_frac)
    assert stats.loss == pytest.approx(ref_stats.loss, rel=EXACT)
    start = {n: p.detach() for n, p in tiny_policy().named_parameters() if n in got}
    assert_same_grads({n: got[n] - start[n] for n in got}, {n: ref[n] - start[n] for n in ref})


def test_micro_batching_equals_one_batch():
    _, one = run(tiny_policy(), groups(), micro_batch=100)
    _, many = run(tiny_policy(), groups(), micro_batch=1)
    assert_same_grads(many, one)


def test_checkpointing_follows_the_memory_budget():
    stats, free = run(tiny_policy(), groups(), micro_batch=5, memory_budget=1 << 40)
    assert stats.checkpointed == 0 and stats.micro_batches > 1 and stats.activation_bytes > 0
    stats, tight = run(tiny_policy(), groups(), micro_batch=5, memory_budget=1)
    assert stats.checkpointed == stats.micro_batches
    assert_same_grads(tight, free)


def test_a_group_over_the_budget_is_split_not_recomputed():
    """Parts of a group, each re-running the prompt: no recomputation, the same gradients, over iterations too."""
    probe = Trainer(tiny_policy(), TrainConfig())
    gs = _clean(groups())
    singles = [probe.plan.estimate(probe._shape([_slice(g, i, i + 1)])) for g in gs for i in range(len(g.completions))]
    budget = max(singles)  # every single completion fits, the largest groups do not
    assert any(probe.plan.estimate(probe._shape([g])) > budget for g in gs)
    stats, free = run(tiny_policy(), groups(), micro_batch=100, memory_budget=1 << 40)
    split_stats, split = run(tiny_policy(), groups(), micro_batch=100, memory_budget=budget)
    assert split_stats.checkpointed == 0 and split_stats.micro_batches > stats.micro_batches == 1
    # a split group's prompt runs once per micro-batch it is in
    assert split_stats.prompt_tokens >= stats.prompt_tokens
    assert split_stats.loss == pytest.approx(stats.loss, rel=EXACT)
    assert_same_grads(split, free)
    moved = []
    for b in (1 << 40, budget):
        model = tiny_policy()
        Trainer(model, TrainConfig(optimizer="sgd", learning_rate=2.0, iterations=3, grad_clip=1e9,
                                   memory_budget=b)).step(groups())
        moved.append({n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad})
    start = {n: p.detach() for n, p in tiny_policy().named_parameters() if n in moved[0]}
    assert_same_grads({n: moved[1][n] - start[n] for n in start}, {n: moved[0][n] - start[n] for n in start})


def test_the_estimate_is_calibrated_by_the_measurement():
    model = tiny_policy()
    trainer = Trainer(model, TrainConfig(micro_batch=100, checkpointing="never"))
    stats = trainer.step(groups())
    assert trainer.plan.measured
    (batch,) = trainer._batches(_clean(groups()))
    assert trainer.plan.estimate(trainer._shape(batch)) == pytest.approx(stats.activation_bytes, rel=1e-6)


def test_more_iterations_make_clipping_act():
    one = Trainer(tiny_policy(), TrainConfig(learning_rate=0.05, iterations=1)).step(groups())
    assert one.clip_low_frac == 0 and one.clip_high_frac == 0  # ratio is exactly 1 on the first pass
    many = Trainer(tiny_policy(), TrainConfig(learning_rate=0.05, iterations=4, grad_clip=1e9)).step(groups())
    assert many.clip_low_frac + many.clip_high_frac > 0


@pytest.mark.parametrize("micro", [1, 100])
def test_completions_without_gradient_are_not_run_and_the_update_is_the_same(micro):
    """Under ``drop`` a peer's below-average answers (and any answer at its group's mean) weigh 0: the update
    leaves them out, yet equals the one over every completion, whose loss is normalised by all their tokens."""
    every = [dataclasses.replace(g, external=k in (1, 3)) for k, g in enumerate(preamble_groups())]
    every[0].advantages[1] = 0.0
    gone = {(0, 1)} | {(k, j) for k in (1, 3) for j, a in enumerate(every[k].advantages) if a < 0}
    assert len(gone) >= 3
    kept = [TrainGroup(g.prompt_ids, [c for j, c in enumerate(g.completions) if (k, j) not in gone],
                       [a for j, a in enumerate(g.advantages) if (k, j) not in gone], external=g.external)
            for k, g in enumerate(every)]
    n_all = sum(len(c) for g in every for c in g.completions)
    n_kept = sum(len(c) for g in kept for c in g.completions)
    # The reference runs every completion it is given (onpolicy weighs all 1) over a normaliser of n_kept tokens
    _, ref = run(tiny_policy(), kept, micro_batch=micro, external_negatives="onpolicy")
    stats, got = run(tiny_policy(), every, micro_batch=micro, external_negatives="drop")
    assert stats.tokens == n_all and stats.tokens_computed == n_kept < n_all
    assert_same_grads(got, {n: g * (n_kept / n_all) for n, g in ref.items()})
    # with nothing that can move the policy, everything runs as before: zero gradients, and a step
    flat = [TrainGroup([1, 2, 3], [[4, 5], [6]], [-1.0, -1.0], external=True)]
    stats, grads = run(tiny_policy(), flat, external_negatives="drop")
    assert stats.tokens_computed == stats.tokens == 3
    assert all(float(g.abs().max()) == 0.0 for g in grads.values())


def test_nothing_to_train_is_a_no_op():
    model = tiny_policy()
    before = {n: p.clone() for n, p in model.named_parameters()}
    stats = Trainer(model, TrainConfig()).step([TrainGroup([1, 2], [[], []], [1.0, -1.0])])
    assert stats.tokens == 0 and stats.sequences == 0
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


@pytest.mark.parametrize("name, cls", [("adamw", torch.optim.AdamW), ("adam", torch.optim.Adam), ("sgd", torch.optim.SGD)])
def test_optimizer_choice(name, cls):
    assert type(Trainer(tiny_policy(), TrainConfig(optimizer=name)).optimizer) is cls


def test_train_sequence_round_trip():
    g = TrainGroup([1, 2], [[3], [4, 5]], [0.5, -0.5])
    assert g.sequences() == [TrainSequence([1, 2], [3], 0.5), TrainSequence([1, 2], [4, 5], -0.5)]
    with pytest.raises(ValueError, match="advantages"):
        TrainGroup([1], [[2]], [])


def cosine(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    x = torch.cat([a[n].flatten() for n in sorted(a)])
    y = torch.cat([b[n].flatten() for n in sorted(b)])
    return float(x @ y / (x.norm() * y.norm()))


def test_bf16_base_keeps_lora_and_activations_fp32():
    model = tiny_policy(bf16=True)
    linears = [m for n, m in model.named_modules() if n.endswith("base_layer")]
    assert linears and all(m.weight.dtype == torch.bfloat16 for m in linears)
    assert all(p.dtype == torch.float32 for p in model.parameters() if p.requires_grad)  # LoRA
    head = model.get_base_model().get_output_embeddings().weight
    assert head.dtype == torch.float32  # and the embeddings, tied or not
    frozen = {n: p.clone() for n, p in model.named_parameters() if not p.requires_grad}
    stats, got = run(model, groups())
    assert all(g.dtype == torch.float32 for g in got.values())
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)
    ref_stats, ref = run(tiny_policy(), groups())
    assert stats.logprob_mean == pytest.approx(ref_stats.logprob_mean, abs=0.02)
    assert cosine(got, ref) > 0.99


def with_pefts_forward(model):
    """The same model with peft's own LoRA forward, the one ``FusedLoraLinear`` replaces."""
    set_fused_lora(model, False)
    return model


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("arch", ["llama", "gemma3_text"])
def test_the_fused_lora_forward_is_pefts_bit_for_bit(arch, bf16):
    model = tiny_policy(arch=arch, bf16=bf16)
    fused = [m for m in model.modules() if isinstance(m, FusedLoraLinear)]
    assert len(fused) == 4 * len(model.get_base_model().model.layers)  # q, k, v, o of every layer
    assert all(m._plain_adapter() == "default" for m in fused)  # the fused path, not peft's fallback
    stats, got = run(model, groups())
    ref_stats, ref = run(with_pefts_forward(tiny_policy(arch=arch, bf16=bf16)), groups())
    assert not any(isinstance(m, FusedLoraLinear) for m in with_pefts_forward(tiny_policy()).modules())
    assert stats.loss == ref_stats.loss and stats.logprob_mean == ref_stats.logprob_mean
    assert got.keys() == ref.keys() and all(torch.equal(got[n], ref[n]) for n in ref)


def test_a_lora_with_dropout_takes_pefts_forward():
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model("llama", vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    model = attach_lora(AutoModelForCausalLM.from_config(cfg), lora_config(4, 8, 0.5, ["q_proj"]))
    layer = next(m for m in model.modules() if isinstance(m, FusedLoraLinear))
    assert layer._plain_adapter() is None
    x = torch.randn(2, 5, 32)
    torch.manual_seed(3)
    out = layer(x)
    with_pefts_forward(model)
    torch.manual_seed(3)
    assert torch.equal(out, layer(x))  # the same dropout mask: peft's forward ran


# --- the bundled model: real weights, real prompts, real completions ---

@pytest.fixture(scope="module")
def real_groups(llm) -> list[TrainGroup]:
    """Two groups of 3 completions sampled by llama.cpp from the bundled model, on real task prompts."""
    from engine.sampling.rollout import RolloutGenerator, SamplingParams
    from engine.tasks.questions import build_messages, build_mix, fewshot_messages

    mix = build_mix("easy")
    prompts = [llm.prompt_tokens(build_messages(q, fewshot_messages(mix[i % len(mix)], 2)))
               for i, q in enumerate(["What is 17 + 25?", "Sum 4, 9 and 12."])]
    gen = RolloutGenerator(llm, seed=0).generate(prompts, 3, SamplingParams(max_tokens=12))
    return [TrainGroup(p, [c.token_ids for c in cs], [1.0, -0.5, -0.5]) for p, cs in zip(prompts, gen)]


def bundled_policy(working_gguf: Path, cache: Path, dtype: torch.dtype = torch.float32):
    from engine.learning.policy import load_base

    torch.manual_seed(0)
    model = attach_lora(load_base(working_gguf, cache, dtype=dtype),
                        lora_config(8, 16, 0.0, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                 "down_proj"]))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.01)
    return model


@pytest.mark.slow
def test_shared_prefix_is_exact_on_the_bundled_model(working_gguf, model_cache, real_groups):
    model = bundled_policy(working_gguf, model_cache)
    assert sum(len(g.prompt_ids) for g in real_groups) > 150  # system prompt + two worked examples each
    ref_stats, ref = run(model, real_groups, micro_batch=4, shared_prefix=False, checkpointing="never")
    stats, got = run(model, real_groups, micro_batch=4)
    assert stats.checkpointed == 0  # small micro-batches fit the default budget: no recomputation
    assert stats.loss == pytest.approx(ref_stats.loss, rel=EXACT)
    assert stats.logprob_mean == pytest.approx(ref_stats.logprob_mean, rel=EXACT)
    # 210 LoRA tensors: the whole gradient to 1e-5; one tensor alone may carry fp32 rounding of the attention
    # softmax (measured: layer 12's q/k LoRA, norms ~0.01, at 0.8-1.3e-5 in this and the previous head code).
    assert_same_grads(got, ref, per_tensor=3 * EXACT)


@pytest.mark.slow
def test_bf16_base_stays_close_to_fp32_on_the_bundled_model(working_gguf, model_cache, real_groups):
    """Measured: mean completion log-prob within ~0.01 nats/token, gradient cosine ~0.99."""
    fp32_stats, fp32 = run(bundled_policy(working_gguf, model_cache), real_groups, micro_batch=4)
    bf16_stats, bf16 = run(bundled_policy(working_gguf, model_cache, torch.bfloat16), real_groups, micro_batch=4)
    print(f"log-prob {fp32_stats.logprob_mean:.4f} fp32, {bf16_stats.logprob_mean:.4f} bf16; "
          f"gradient cosine {cosine(bf16, fp32):.4f}")
    assert bf16_stats.logprob_mean == pytest.approx(fp32_stats.logprob_mean, abs=0.05)
    assert cosine(bf16, fp32) > 0.95


def test_progress_is_reported_per_micro_batch():
    calls: list[tuple[int, int]] = []
    trainer = Trainer(tiny_policy(), TrainConfig(micro_batch=5))
    stats = trainer.step(groups(), lambda done, total: calls.append((done, total)))
    n = stats.micro_batches
    assert n > 1 and calls == [(i, n) for i in range(1, n + 1)]


def test_a_non_finite_gradient_is_left_out_and_the_next_update_is_clean():
    # One NaN advantage makes the whole gradient NaN; stepping on it would leave the LoRA and AdamW's moments NaN
    # for good, so the model would answer nothing again (a checkpoint saved after it, too).
    model = tiny_policy()
    trainer = Trainer(model, TrainConfig(learning_rate=1e-2, micro_batch=2))
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    bad = groups()
    bad[0] = dataclasses.replace(bad[0], advantages=[float("nan")] + bad[0].advantages[1:])
    stats = trainer.step(bad)
    assert stats.skipped == 1 and not math.isfinite(stats.grad_norm)
    assert all(torch.equal(p, lora[n]) for n, p in model.named_parameters() if n in lora)
    stats = trainer.step(groups())
    assert stats.skipped == 0 and math.isfinite(stats.grad_norm)
    moved = [n for n, p in model.named_parameters() if n in lora and not torch.equal(p, lora[n])]
    assert moved and all(torch.isfinite(p).all() for n, p in model.named_parameters() if n in lora)
