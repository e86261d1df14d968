"""The GRPO trainer on a tiny real llama model (random weights, real torch and peft)."""

from __future__ import annotations

import pytest
import torch

from engine.policy import attach_lora, lora_config
from engine.groups import TrainSequence as Sample
from engine.trainer import TrainConfig, Trainer, target_logprobs


def tiny_policy(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    base = LlamaForCausalLM(cfg)
    for p in base.parameters():
        p.requires_grad_(False)
    model = attach_lora(base, lora_config(4, 8, 0.0, ["q_proj", "k_proj", "v_proj", "o_proj"]))
    with torch.no_grad():  # non-zero B so that every LoRA tensor gets a gradient
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    return model


def samples(seed: int = 1) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(6):
        prompt = torch.randint(0, 97, (int(torch.randint(3, 8, (1,), generator=g)),), generator=g).tolist()
        comp = torch.randint(0, 97, (int(torch.randint(1, 9, (1,), generator=g)),), generator=g).tolist()
        out.append(Sample(prompt, comp, [1.0, -1.0, 0.5, -0.5, 2.0, -2.0][i]))
    return out


def test_chunked_logprobs_equal_full_log_softmax():
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=False)
    h, t = torch.randn(37, 16), torch.randint(0, 50, (37,))
    full = torch.log_softmax(head(h), -1).gather(-1, t[:, None]).squeeze(-1)
    assert torch.allclose(target_logprobs(head, h, t, chunk=8), full, atol=1e-6)


def test_step_moves_lora_but_never_the_base():
    model = tiny_policy()
    base = {n: p.clone() for n, p in model.named_parameters() if not p.requires_grad}
    lora = {n: p.clone() for n, p in model.named_parameters() if p.requires_grad}
    stats = Trainer(model, TrainConfig(learning_rate=1e-2, micro_batch=2, gradient_checkpointing=False)).step(samples())
    assert stats.tokens == sum(len(s.completion_ids) for s in samples()) and stats.sequences == 6
    for n, p in model.named_parameters():
        if n in base:
            assert torch.equal(p, base[n]), n
    assert all(not torch.equal(p, lora[n]) for n, p in model.named_parameters() if n in lora)


def test_micro_batching_equals_one_batch():
    results = []
    for micro in (1, 6):
        model = tiny_policy()
        Trainer(model, TrainConfig(optimizer="sgd", learning_rate=0.5, micro_batch=micro, grad_clip=1e9,
                                   gradient_checkpointing=False)).step(samples())
        results.append({n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad})
    for n in results[0]:
        assert torch.allclose(results[0][n], results[1][n], atol=1e-5), n


def test_gradient_checkpointing_changes_nothing_but_memory():
    results = []
    for ckpt in (False, True):
        model = tiny_policy()
        Trainer(model, TrainConfig(optimizer="sgd", learning_rate=0.5, grad_clip=1e9, gradient_checkpointing=ckpt)).step(samples())
        results.append({n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad})
    for n in results[0]:
        assert torch.allclose(results[0][n], results[1][n], atol=1e-5), n


def test_more_iterations_make_clipping_act():
    model = tiny_policy()
    one = Trainer(model, TrainConfig(learning_rate=0.05, iterations=1)).step(samples())
    assert one.clip_low_frac == 0 and one.clip_high_frac == 0  # ratio is exactly 1 on the first pass
    model = tiny_policy()
    many = Trainer(model, TrainConfig(learning_rate=0.05, iterations=4, grad_clip=1e9)).step(samples())
    assert many.clip_low_frac + many.clip_high_frac > 0


@pytest.mark.parametrize("name, cls", [("adamw", torch.optim.AdamW), ("adam", torch.optim.Adam), ("sgd", torch.optim.SGD)])
def test_optimizer_choice(name, cls):
    assert type(Trainer(tiny_policy(), TrainConfig(optimizer=name)).optimizer) is cls
