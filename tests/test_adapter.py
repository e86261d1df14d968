"""LoRA export to llama.cpp's adapter format and hot-swap, against the real model on both sides.

One module fixture loads the Q4_0 working copy into llama.cpp and torch, trains a LoRA for
a couple of real optimizer steps, and measures log-probs of a held-out chat on both sides;
the tests compare those. The yardstick for "llama.cpp follows torch" is the base model's
own gap between the two sides (llama.cpp quantizes activations inside its matmuls).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.sampling import adapter as adapter_mod
from engine.sampling.adapter import AdapterSync, export_gguf_adapter
from engine.errors import SapoError

pytestmark = pytest.mark.slow

ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TRAIN_CHAT = [
    {"role": "user", "content": "What is 7 + 5?"},
    {"role": "assistant", "content": "7 + 5 = 12\n<answer>12</answer> Purple pineapples sing to the moon."},
]
HELD_OUT_CHAT = [
    {"role": "user", "content": "Name a colour and a fruit."},
    {"role": "assistant", "content": "Blue, and a banana. The weather is nice today."},
]
# Adapter gap <= K * base gap + MARGIN. Measured after 2 steps: base gap 0.12 nats/token (mean
# |llama.cpp - torch|), adapter gap 0.06 (0.12 without the q/k permutation); K and MARGIN
# leave room for other texts and thread counts.
K = 1.5
MARGIN = 0.03


@dataclass
class Setup:
    llm: object  # engine.sampling.llm.LlamaModel
    model: object  # peft.PeftModel
    arch: str
    n_head: int
    n_head_kv: int
    held_out: list[int]
    torch_base: np.ndarray  # per-token log-probs of the held-out chat
    torch_lora: np.ndarray
    llama_base: np.ndarray


def torch_logprobs(model: torch.nn.Module, tokens: list[int]) -> np.ndarray:
    """log p(tokens[i] | tokens[:i]) for i >= 1, like LlamaModel.token_logprobs(tokens, 1)."""
    with torch.no_grad():
        ids = torch.tensor([tokens])
        logits = model(input_ids=ids).logits[0, :-1].double()
        return torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None])[:, 0].numpy()


@pytest.fixture(scope="module")
def setup(working_gguf: Path, model_cache: Path):
    from engine.sampling.llm import LlamaModel
    from engine.models.modelfile import inspect_gguf
    from engine.learning.policy import attach_lora, load_base, lora_config

    info = inspect_gguf(working_gguf)
    # One thread each: on a busy 2-core machine, 2 threads of torch or llama.cpp spin at their
    # barriers and run 10-20x slower than one.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    llm = LlamaModel(working_gguf, n_ctx=512, n_seq_max=1, threads=1)
    try:
        torch.manual_seed(0)
        model = attach_lora(load_base(working_gguf, model_cache), lora_config(8, 16, 0.0, ALL_LINEAR))
        held_out = llm.prompt_tokens(HELD_OUT_CHAT)
        train = torch.tensor([llm.prompt_tokens(TRAIN_CHAT)])
        with model.disable_adapter():
            torch_base = torch_logprobs(model, held_out)
        # Real steps, so that every LoRA B (zero at init) takes non-zero values.
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        for _ in range(2):
            logits = model(input_ids=train).logits[0, :-1]
            loss = torch.nn.functional.cross_entropy(logits, train[0, 1:])
            opt.zero_grad()
            loss.backward()
            opt.step()
        yield Setup(llm, model, info.architecture, info.n_head, info.n_head_kv, held_out, torch_base,
                    torch_logprobs(model, held_out), llm.token_logprobs(held_out, 1))
    finally:
        llm.close()
        torch.set_num_threads(threads)


def gap(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).mean())


def lora(module: torch.nn.Module, which: str) -> np.ndarray:
    """peft's lora_A or lora_B weight of one adapted layer."""
    return getattr(module, f"lora_{which}")["default"].weight.detach().numpy()


def test_lora_changed_the_torch_model(setup: Setup) -> None:
    assert gap(setup.torch_lora, setup.torch_base) >= 0.2


def test_llama_cpp_with_adapter_follows_torch(setup: Setup, tmp_path: Path) -> None:
    path = tmp_path / "lora.gguf"
    export_gguf_adapter(setup.model, setup.arch, path, n_head=setup.n_head, n_head_kv=setup.n_head_kv)
    setup.llm.swap_adapter(path)
    try:
        llama_lora = setup.llm.token_logprobs(setup.held_out, 1)
    finally:
        setup.llm.swap_adapter(None)
    base_gap = gap(setup.llama_base, setup.torch_base)
    adapter_gap = gap(llama_lora, setup.torch_lora)
    print(f"base gap {base_gap:.4f}, adapter gap {adapter_gap:.4f}")
    assert adapter_gap <= K * base_gap + MARGIN
    assert gap(llama_lora, setup.llama_base) >= 0.2  # the adapter is really applied
    # Swapping back to no adapter gives exactly the base model again.
    assert np.abs(setup.llm.token_logprobs(setup.held_out, 1) - setup.llama_base).max() < 1e-4


def test_without_the_qk_permutation_llama_cpp_drifts(setup: Setup, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A random LoRA on q and k only, so that its whole effect depends on the row order."""
    from peft import LoraConfig

    model = setup.model
    model.add_adapter("qk", LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj"]))
    try:
        model.set_adapter("qk")
        gen = torch.Generator().manual_seed(1)
        for name, p in model.named_parameters():
            if ".lora_B.qk." in name:
                p.data.normal_(0.0, 0.2, generator=gen)
        torch_qk = torch_logprobs(model, setup.held_out)
        assert gap(torch_qk, setup.torch_base) >= 0.2  # measured 0.45
        results = {}
        for permute in (True, False):
            if not permute:
                monkeypatch.setattr(adapter_mod, "_rope_row_order", lambda n_rows, n_heads: np.arange(n_rows))
            path = tmp_path / f"lora-{permute}.gguf"
            export_gguf_adapter(model, setup.arch, path, n_head=setup.n_head, n_head_kv=setup.n_head_kv)
            setup.llm.swap_adapter(path)
            results[permute] = gap(setup.llm.token_logprobs(setup.held_out, 1), torch_qk)
    finally:
        setup.llm.swap_adapter(None)
        model.set_adapter("default")
        model.delete_adapter("qk")
    print(f"q/k-only adapter gap with permutation {results[True]:.4f}, without {results[False]:.4f}")
    # Measured: 0.11 with, 0.43 without (base gap 0.12).
    assert results[True] <= K * gap(setup.llama_base, setup.torch_base) + MARGIN
    assert results[False] > 2 * results[True]


def test_adapter_sync_alternates_files_and_swaps_repeatedly(setup: Setup, tmp_path: Path) -> None:
    import psutil

    adapters = tmp_path / "adapters"
    sync = AdapterSync(setup.llm, adapters, setup.arch, n_head=setup.n_head, n_head_kv=setup.n_head_kv)
    try:
        ms = sync.sync(setup.model)
        first = setup.llm.token_logprobs(setup.held_out, 1)
        assert ms > 0
        assert gap(first, setup.llama_base) >= 0.2
        rss = psutil.Process().memory_info().rss
        seen = set()
        for _ in range(20):
            previous = sync.current
            sync.sync(setup.model)
            assert sync.current != previous  # the loaded file is never the one rewritten
            assert sorted(adapters.iterdir()) == [sync.current]  # stale file deleted, no temp left
            seen.add(sync.current.name)
        grown = psutil.Process().memory_info().rss - rss
        print(f"20 syncs: RSS grew {grown / 2**20:.1f} MB")
        assert seen == {"lora-a.gguf", "lora-b.gguf"}
        # Each adapter holds ~9 MB of tensors: a leak of freed adapters would show as ~180 MB.
        assert grown < 60 * 2**20, f"RSS grew {grown / 2**20:.0f} MB over 20 swaps"
        # The same LoRA, swapped in 20 more times, gives the same log-probs.
        assert np.abs(setup.llm.token_logprobs(setup.held_out, 1) - first).max() < 1e-4
    finally:
        setup.llm.swap_adapter(None)


def test_written_tensors_names_shapes_and_metadata(setup: Setup, tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "lora.gguf"
    export_gguf_adapter(setup.model, setup.arch, path, n_head=setup.n_head, n_head_kv=setup.n_head_kv)
    reader = gguf.GGUFReader(path)
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.fields["general.type"].contents() == "adapter"
    assert reader.fields["adapter.type"].contents() == "lora"
    assert reader.fields["adapter.lora.alpha"].contents() == pytest.approx(16.0)
    tensors = {t.name: t.data for t in reader.tensors}
    assert len(tensors) == 30 * 7 * 2
    layer = setup.model.get_base_model().model.layers[3]
    q, down = layer.self_attn.q_proj, layer.mlp.down_proj
    np.testing.assert_array_equal(tensors["blk.3.ffn_down.weight.lora_a"], lora(down, "A"))
    np.testing.assert_array_equal(tensors["blk.3.ffn_down.weight.lora_b"], lora(down, "B"))
    np.testing.assert_array_equal(tensors["blk.3.attn_q.weight.lora_a"], lora(q, "A"))
    # Undoing the converter's q/k row order, the way transformers' GGUF loader does, gives peft's B.
    for name, module, heads in [("attn_q", q, 9), ("attn_k", layer.self_attn.k_proj, 3)]:
        b = tensors[f"blk.3.{name}.weight.lora_b"]
        assert b.shape == (heads * 64, 8)
        unpermuted = b.reshape(heads, 32, 2, 8).swapaxes(1, 2).reshape(b.shape)
        np.testing.assert_array_equal(unpermuted, lora(module, "B"))
        assert not np.array_equal(b, lora(module, "B"))


def _tiny(model_type: str, **lora_kwargs):
    """A random two-layer model of the given architecture (no download), with a LoRA on it."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(model_type, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, vocab_size=128, head_dim=16)
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_config(cfg),
                           LoraConfig(r=4, lora_alpha=8, target_modules=ALL_LINEAR, **lora_kwargs))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p)
    return model


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_qwen_layouts_are_written_unpermuted(arch: str, tmp_path: Path) -> None:
    import gguf

    model = _tiny(arch)
    path = tmp_path / "lora.gguf"
    export_gguf_adapter(model, arch, path)
    reader = gguf.GGUFReader(path)
    assert reader.fields["general.architecture"].contents() == arch
    tensors = {t.name: t.data for t in reader.tensors}
    assert len(tensors) == 2 * 7 * 2
    layer = model.get_base_model().model.layers[1]
    for hf, name in [(layer.self_attn.q_proj, "attn_q"), (layer.self_attn.k_proj, "attn_k"),
                     (layer.mlp.up_proj, "ffn_up")]:
        np.testing.assert_array_equal(tensors[f"blk.1.{name}.weight.lora_b"], lora(hf, "B"))


def test_per_module_scaling_is_folded_into_b(tmp_path: Path) -> None:
    import gguf

    model = _tiny("llama", alpha_pattern={"v_proj": 32})  # v: scaling 8, others 2
    path = tmp_path / "lora.gguf"
    export_gguf_adapter(model, "llama", path)
    reader = gguf.GGUFReader(path)
    assert reader.fields["adapter.lora.alpha"].contents() == pytest.approx(8.0)
    tensors = {t.name: t.data for t in reader.tensors}
    v = model.get_base_model().model.layers[0].self_attn.v_proj
    np.testing.assert_allclose(tensors["blk.0.attn_v.weight.lora_b"], 4 * lora(v, "B"), rtol=1e-6)


def test_unsupported_architecture_is_refused(tmp_path: Path) -> None:
    model = _tiny("llama")
    with pytest.raises(SapoError, match="gemma2"):
        export_gguf_adapter(model, "gemma2", tmp_path / "x.gguf")
    with pytest.raises(SapoError, match="gemma2"):
        AdapterSync(None, tmp_path / "adapters", "gemma2")  # type: ignore[arg-type]
    assert not list(tmp_path.iterdir())
