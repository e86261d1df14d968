"""Gemma 3 end to end on the real 270M file: template, rollouts, torch policy, LoRA export, a node.

The file is a test fixture (tests/conftest.py: gemma_gguf), never part of the product. The
fidelity yardstick is the one tests/test_adapter.py uses for llama: llama.cpp with the
exported adapter must follow torch's LoRA about as closely as the two bases follow each other.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.sampling.adapter import AdapterSync, export_gguf_adapter
from engine.tasks.questions import SYSTEM_PROMPT, build_messages

from test_adapter import ALL_LINEAR, HELD_OUT_CHAT, K, MARGIN, TRAIN_CHAT, gap, lora, torch_logprobs

pytestmark = pytest.mark.slow


@dataclass
class Setup:
    llm: object  # engine.sampling.llm.LlamaModel
    model: object  # peft.PeftModel
    info: object  # engine.models.modelfile.GGUFInfo
    held_out: list[int]
    torch_base: np.ndarray
    torch_lora: np.ndarray
    llama_base: np.ndarray


@pytest.fixture(scope="module")
def gemma(gemma_gguf: Path, model_cache: Path):
    from engine.sampling.llm import LlamaModel
    from engine.models.modelfile import inspect_gguf
    from engine.learning.policy import attach_lora, load_base, lora_config

    info = inspect_gguf(gemma_gguf)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # see tests/test_adapter.py: one thread each on a busy 2-core box
    llm = LlamaModel(gemma_gguf, n_ctx=2048, n_seq_max=8, threads=1)
    try:
        torch.manual_seed(0)
        model = attach_lora(load_base(gemma_gguf, model_cache / "torch"), lora_config(8, 16, 0.0, ALL_LINEAR))
        held_out = llm.prompt_tokens(HELD_OUT_CHAT)
        train = torch.tensor([llm.prompt_tokens(TRAIN_CHAT)])
        with model.disable_adapter():
            torch_base = torch_logprobs(model, held_out)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        for _ in range(2):  # real steps: every LoRA B (zero at init) takes non-zero values
            logits = model(input_ids=train).logits[0, :-1]
            loss = torch.nn.functional.cross_entropy(logits, train[0, 1:])
            opt.zero_grad()
            loss.backward()
            opt.step()
        yield Setup(llm, model, info, held_out, torch_base, torch_logprobs(model, held_out),
                    llm.token_logprobs(held_out, 1))
    finally:
        llm.close()
        torch.set_num_threads(threads)


def test_fixture_is_gemma3_270m(gemma_gguf: Path) -> None:
    from engine.models.modelfile import inspect_gguf

    info = inspect_gguf(gemma_gguf)
    assert info.architecture == "gemma3" and info.supported
    assert (info.n_layers, info.n_embd, info.n_head, info.n_head_kv, info.head_dim) == (18, 640, 4, 1, 256)
    assert (info.n_ff, info.vocab_size, info.file_type) == (2048, 262144, "Q4_K_M")
    assert info.n_params == 268_098_176
    assert info.tokenizer == "llama" and not info.has_chat_template  # a base model: no template in the file


def test_chat_template_is_gemmas_with_the_system_text_in_the_first_user_turn(gemma: Setup) -> None:
    llm = gemma.llm
    shots = [{"role": "user", "content": "1 + 1?"}, {"role": "assistant", "content": "<answer>2</answer>"}]
    text = llm.render_chat(build_messages("What is 2 + 3?", shots))
    assert text == ("<bos><start_of_turn>user\n" + SYSTEM_PROMPT + "\n\n1 + 1?<end_of_turn>\n"
                    "<start_of_turn>model\n<answer>2</answer><end_of_turn>\n"
                    "<start_of_turn>user\nWhat is 2 + 3?<end_of_turn>\n<start_of_turn>model\n")
    assert not llm.fold_system  # Gemma's template does the folding itself
    ids = llm.prompt_tokens(build_messages("What is 2 + 3?", shots))
    assert ids[:2] == [2, 105] and ids.count(2) == 1  # one <bos>, then <start_of_turn>
    assert ids[-3:] == llm.tokenize("<start_of_turn>model\n", special=True)
    # The turn markers end a Gemma answer.
    assert 106 in llm.eog_ids.tolist() and llm.piece(106, special=True) == b"<end_of_turn>"


def test_batched_rollouts_share_prompts_under_sliding_window_attention(gemma: Setup) -> None:
    """Greedy answers from one batch (prompt KV copied to every sequence) equal those decoded one by one,
    also for a prompt longer than Gemma's 512-token window."""
    from engine.sampling.rollout import RolloutGenerator, SamplingParams

    long_q = " ".join(f"Box {i} holds {i * 7 % 13} stones." for i in range(70)) + " How many stones are in box 3?"
    prompts = [gemma.llm.prompt_tokens(build_messages(q, [])) for q in ("What is 12 + 30?", long_q)]
    assert len(prompts[1]) > 600
    params = SamplingParams(max_tokens=12, temperature=0, stop_at_answer=False)
    gen = RolloutGenerator(gemma.llm)
    batched = gen.generate(prompts, 3, params)
    alone = [gen.generate([p], 1, params)[0][0] for p in prompts]
    for group, single in zip(batched, alone):
        assert [c.token_ids for c in group] == [single.token_ids] * 3
        assert len(single.token_ids) >= 1


def test_torch_weights_are_the_files(gemma: Setup, gemma_gguf: Path) -> None:
    """Dequantization, the norm offset, tied embeddings and the embedding scale, against the GGUF itself."""
    import gguf

    tensors = {t.name: t for t in gguf.GGUFReader(gemma_gguf).tensors}

    def deq(name: str, rows: int | None = None) -> np.ndarray:
        t = tensors[name]
        data = t.data if rows is None else t.data[:rows]
        return gguf.dequantize(data, t.tensor_type)

    hf = gemma.model.get_base_model()
    layer = hf.model.layers[5]
    modules = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
               "ffn_down": "mlp.down_proj"}
    # One linear weight of each quantization the file mixes (Q4_K_M puts several kinds in layers).
    firsts: dict[str, str] = {}
    for name, t in tensors.items():
        if name.split(".")[-2] in modules:
            firsts.setdefault(t.tensor_type.name, name)
    assert set(firsts) == {"Q5_0", "Q4_K", "Q8_0", "Q6_K"}
    for name in firsts.values():
        _, block, kind, _ = name.split(".")
        module = hf.model.layers[int(block)].get_submodule(modules[kind])
        np.testing.assert_array_equal(module.base_layer.weight.detach().numpy(), deq(name))
    # llama.cpp's converter stores Gemma's norms as 1 + w; transformers' Gemma adds the 1 back itself.
    np.testing.assert_allclose(layer.input_layernorm.weight.detach().numpy() + 1, deq("blk.5.attn_norm.weight"),
                               rtol=1e-6)
    np.testing.assert_allclose(layer.self_attn.q_norm.weight.detach().numpy() + 1,
                               deq("blk.5.attn_q_norm.weight"), rtol=1e-6)
    embed = hf.model.embed_tokens
    np.testing.assert_array_equal(embed.weight[:64].detach().numpy(), deq("token_embd.weight", 64))
    assert "output.weight" not in tensors and hf.lm_head.weight.data_ptr() == embed.weight.data_ptr()
    assert float(embed.embed_scale) == pytest.approx(math.sqrt(640), rel=1e-3)
    assert hf.config.sliding_window == 512 and hf.config.layer_types.count("full_attention") == 3
    assert hf.config.final_logit_softcapping is None


def test_base_models_agree_across_the_sliding_window(gemma: Setup) -> None:
    """Tokens past the 512-token window: torch with the window follows llama.cpp, torch without it does not."""
    llm, hf = gemma.llm, gemma.model.get_base_model()
    text = " ".join(f"Item {i}: the {['red', 'green', 'blue', 'white'][i % 4]} box holds {i * 7 % 13} stones."
                    for i in range(50))
    tokens = [2] + llm.tokenize(text)
    assert len(tokens) > 600

    def logprobs() -> np.ndarray:
        with torch.no_grad(), gemma.model.disable_adapter():
            ids = torch.tensor([tokens])
            hidden = hf.model(input_ids=ids).last_hidden_state[0, :-1]
            out = [torch.log_softmax(hf.lm_head(hidden[s:s + 128]).double(), -1)
                   .gather(1, ids[0, 1 + s:1 + s + 128, None])[:, 0] for s in range(0, hidden.shape[0], 128)]
            return torch.cat(out).numpy()

    tail = slice(560, None)
    windowed = logprobs()
    hf.config.sliding_window = 1 << 20  # every layer sees the whole sequence
    try:
        unwindowed = logprobs()
    finally:
        hf.config.sliding_window = 512
    llama = llm.token_logprobs(tokens, 1)
    print(f"past the window: torch {gap(windowed[tail], llama[tail]):.4f}, "
          f"torch without the window {gap(unwindowed[tail], llama[tail]):.4f}")
    # Measured 0.007 and 0.52 nats/token.
    assert gap(windowed[tail], llama[tail]) < 0.1
    assert gap(unwindowed[tail], llama[tail]) > 5 * gap(windowed[tail], llama[tail])


def test_lora_changed_the_torch_model(gemma: Setup) -> None:
    assert gap(gemma.torch_lora, gemma.torch_base) >= 0.2


def test_llama_cpp_with_adapter_follows_torch(gemma: Setup, tmp_path: Path) -> None:
    path = tmp_path / "lora.gguf"
    export_gguf_adapter(gemma.model, "gemma3", path, n_head=gemma.info.n_head, n_head_kv=gemma.info.n_head_kv)
    gemma.llm.swap_adapter(path)
    try:
        llama_lora = gemma.llm.token_logprobs(gemma.held_out, 1)
    finally:
        gemma.llm.swap_adapter(None)
    base_gap = gap(gemma.llama_base, gemma.torch_base)
    adapter_gap = gap(llama_lora, gemma.torch_lora)
    print(f"gemma: base gap {base_gap:.4f}, adapter gap {adapter_gap:.4f}")
    # Measured: base gap 0.15, adapter gap 0.11 (the adapter moved log-probs by 3.2 nats/token).
    assert adapter_gap <= K * base_gap + MARGIN
    assert gap(llama_lora, gemma.llama_base) >= 0.2
    assert np.abs(gemma.llm.token_logprobs(gemma.held_out, 1) - gemma.llama_base).max() < 1e-4


def test_adapter_names_and_layout(gemma: Setup, tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "lora.gguf"
    export_gguf_adapter(gemma.model, "gemma3", path)
    reader = gguf.GGUFReader(path)
    assert reader.fields["general.architecture"].contents() == "gemma3"
    assert reader.fields["adapter.type"].contents() == "lora"
    tensors = {t.name: t.data for t in reader.tensors}
    assert len(tensors) == 18 * 7 * 2
    layer = gemma.model.get_base_model().model.layers[4]
    for hf, name in [(layer.self_attn.q_proj, "attn_q"), (layer.self_attn.k_proj, "attn_k"),
                     (layer.self_attn.o_proj, "attn_output"), (layer.mlp.gate_proj, "ffn_gate")]:
        # No row reordering for Gemma: B is written as peft holds it.
        np.testing.assert_array_equal(tensors[f"blk.4.{name}.weight.lora_b"], lora(hf, "B"))
        np.testing.assert_array_equal(tensors[f"blk.4.{name}.weight.lora_a"], lora(hf, "A"))
    assert tensors["blk.4.attn_q.weight.lora_b"].shape == (4 * 256, 8)
    assert tensors["blk.4.attn_k.weight.lora_b"].shape == (1 * 256, 8)


def test_adapter_sync_swaps_repeatedly(gemma: Setup, tmp_path: Path) -> None:
    sync = AdapterSync(gemma.llm, tmp_path / "adapters", "gemma3")
    try:
        sync.sync(gemma.model)
        first = gemma.llm.token_logprobs(gemma.held_out, 1)
        assert gap(first, gemma.llama_base) >= 0.2
        for _ in range(5):
            sync.sync(gemma.model)
            assert sorted((tmp_path / "adapters").iterdir()) == [sync.current]
        assert np.abs(gemma.llm.token_logprobs(gemma.held_out, 1) - first).max() < 1e-4
    finally:
        gemma.llm.swap_adapter(None)


SMALL = ["--offline", "--tasks", "basic_arithmetic", "--local", "2", "--external", "0", "--completions", "4",
         "--max-tokens", "24", "--eval-every", "0", "--threads", "1", "--quiet"]


def _engine(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "SAPO_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"})


def test_node_trains_resumes_and_exports_gemma(gemma: Setup, gemma_gguf: Path, model_cache: Path,
                                               tmp_path: Path) -> None:
    """A Gemma node: a round, a resume that hot-swaps the checkpoint's LoRA back in, an export llama.cpp loads."""
    data = tmp_path / "data"
    trained_tokens = 0
    for rounds in (1, 2):
        events = tmp_path / f"events-{rounds}.jsonl"
        proc = _engine("run", *SMALL, "--model", str(gemma_gguf), "--rounds", str(rounds), "--data-dir", str(data),
                       "--events", str(events), cache=model_cache)
        assert proc.returncode == 0, proc.stderr[-2000:]
        evs = [json.loads(x) for x in events.read_text().splitlines()]
        start = next(e for e in evs if e["type"] == "start")
        assert start["model_path"] == str(gemma_gguf)  # Q4_K_M is used as it is
        (r,) = [e for e in evs if e["type"] == "round"]
        assert r["round"] == rounds and r["gen_tokens"] > 0 and math.isfinite(r["loss"])
        trained_tokens += r["tokens_trained"]
        if rounds == 2:
            assert any(e["type"] == "status" and e["message"].startswith("resumed from round-000001") for e in evs)
    out = tmp_path / "export"
    proc = _engine("export", "--data-dir", str(data), str(out), cache=model_cache)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "peft" / "adapter_model.safetensors").is_file()
    # The exported adapter loads into llama.cpp on the Gemma base; it changes what the model computes
    # once a round had reward spread to train on (a round without any leaves LoRA B at zero).
    gemma.llm.swap_adapter(out / "lora.gguf")
    try:
        trained = gemma.llm.token_logprobs(gemma.held_out, 1)
    finally:
        gemma.llm.swap_adapter(None)
    print(f"gemma node: {trained_tokens} tokens trained, export moved held-out log-probs by "
          f"{gap(trained, gemma.llama_base):.4f}")
    assert gap(trained, gemma.llama_base) < 5
    assert (gap(trained, gemma.llama_base) > 1e-4) == (trained_tokens > 0)
