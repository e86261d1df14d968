"""engine.models.catalog: the model list and the memory formula."""

from __future__ import annotations

import re

import pytest

from engine.models import catalog
from engine.models.catalog import CATALOG, GiB, ModelShape, by_name, bundled_entry, entry_from_gguf, memory_needs
from engine.models.modelfile import SUPPORTED_ARCHITECTURES, bundled_model_path, inspect_gguf


def test_names_unique_and_typable():
    names = [e.name for e in CATALOG]
    assert len(names) == len(set(names))
    for n in names:
        assert re.fullmatch(r"[a-z0-9.\-]+", n), n


def test_required_models_present():
    for name in ("smollm2-135m", "smollm2-360m", "smollm2-1.7b", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b",
                 "qwen2.5-7b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "llama3.2-1b", "llama3.2-3b"):
        assert by_name(name) is not None, name


def test_entries_well_formed():
    for e in CATALOG:
        assert e.architecture in SUPPORTED_ARCHITECTURES, e.name
        assert e.filename.endswith(".gguf")
        assert e.n_params == e.shape.n_params
        assert e.file_size_bytes > 0
        assert e.quantization.upper() in e.filename.upper().replace(".", "_") or e.bundled, e.name
        if e.source == "hub":
            assert e.repo_id and re.fullmatch(r"[\w.\-]+/[\w.\-]+", e.repo_id), e.name
        assert e.shape.n_head % e.shape.n_head_kv == 0, e.name


def test_exactly_one_bundled_entry():
    bundled = [e for e in CATALOG if e.bundled]
    assert len(bundled) == 1 and bundled[0] is bundled_entry()
    assert bundled[0].repo_id is None and bundled[0].filename == bundled_model_path().name


def test_shapes_agree_with_parameter_counts():
    # Catches a typo in a layer count or width: the shape must imply the stated size.
    for e in CATALOG:
        implied = e.shape.estimated_params(tied_embeddings=e.tied_embeddings)
        assert abs(implied - e.n_params) / e.n_params < 0.01, (e.name, implied, e.n_params)


def test_bundled_entry_matches_the_file():
    info = inspect_gguf(bundled_model_path())
    e = bundled_entry()
    assert e.n_params == info.n_params
    assert e.file_size_bytes == info.size_bytes
    assert e.architecture == info.architecture and e.quantization == info.file_type
    s = e.shape
    assert (s.n_layers, s.n_embd, s.n_head, s.n_head_kv, s.head_dim, s.n_ff, s.vocab_size) == (
        info.n_layers, info.n_embd, info.n_head, info.n_head_kv, info.head_dim, info.n_ff, info.vocab_size)


def test_local_file_entry_gets_same_estimate_as_catalog():
    local = entry_from_gguf(inspect_gguf(bundled_model_path()))
    assert local.source == "local" and local.local_path is not None
    formula = memory_needs(bundled_entry().shape, bundled_entry().file_size_bytes, "cpu")
    assert local.memory("cpu") == formula


@pytest.mark.parametrize("device", ["cpu", "cuda", "mps"])
def test_memory_grows_with_parameters(device):
    ordered = sorted(CATALOG, key=lambda e: e.n_params)
    # Memory also grows with the vocabulary (log-prob chunks, the embedding's dequantization on
    # load): compare like with like.
    for vocab in {e.shape.vocab_size for e in CATALOG}:
        same = [e for e in ordered if e.shape.vocab_size == vocab]
        train = [e.memory(device).train_bytes for e in same]
        load = [e.memory(device).load_ram_bytes for e in same]
        assert train == sorted(train), vocab
        assert load == sorted(load), vocab


def test_a_large_vocabulary_costs_training_memory():
    # Gemma 3 270M has fewer parameters than SmolLM2 360M but a 262k vocabulary: on a GPU
    # (bf16 base) its 256-token chunks of fp32 logits outweigh the difference.
    gemma, smol = by_name("gemma3-270m"), by_name("smollm2-360m")
    assert gemma.n_params < smol.n_params
    assert gemma.memory("cuda").train_bytes > smol.memory("cuda").train_bytes


def test_gemma_entries_are_never_picked_automatically():
    from engine.models.hardware import format_catalog, recommend
    from test_hardware import cpu_box, gpu_box

    for name in ("gemma3-270m", "gemma3-1b"):
        e = by_name(name)
        assert e.architecture == "gemma3" and not e.auto_pick and "Gemma Terms" in e.licence
    assert by_name("gemma3-1b").memory("cpu").basis == "estimated"
    # A lone Gemma entry is not a recommendation: the user accepts its terms by naming it.
    with pytest.raises(Exception, match="empty"):
        recommend(cpu_box(2, 24), (by_name("gemma3-270m"),))
    for hw in (cpu_box(4, 16), cpu_box(2, 24), gpu_box(8, ram_gib=32)):
        assert recommend(hw).entry.architecture != "gemma3"
    assert "gemma3-270m, gemma3-1b: Gemma Terms of Use" in format_catalog(cpu_box(2, 24))


def test_memory_parts_are_plausible():
    for e in CATALOG:
        cpu, gpu = e.memory("cpu"), e.memory("cuda")
        assert cpu.rollout_bytes > e.file_size_bytes  # weights + KV cache + buffers
        assert cpu.train_bytes > e.n_params * 4  # fp32 base
        assert gpu.train_bytes > e.n_params * 2  # bf16 base
        assert gpu.train_bytes < cpu.train_bytes
        assert cpu.load_ram_bytes >= e.n_params * 8  # fp32 state dict + fp32 model
    q7 = by_name("qwen2.5-7b").memory("cuda")
    assert 15 * GiB < q7.train_bytes < 22 * GiB
    assert 4.5 * GiB < q7.rollout_bytes < 7 * GiB


def test_basis_marks_measured_and_estimated():
    assert bundled_entry().memory("cpu").basis.startswith("measured")
    assert bundled_entry().memory("cuda").basis == "estimated"  # measured on CPU only
    for e in CATALOG:
        if e.measured is None:
            assert e.memory("cpu").basis == "estimated"
    assert by_name("gemma3-270m").memory("cpu").basis == "measured (training, load), rest estimated"


def test_lora_param_count_matches_peft_for_bundled():
    # peft's r=16 LoRA on all linear layers of SmolLM2-135M has 4,884,480 trainable
    # parameters (measured with peft 0.21).
    assert bundled_entry().shape.lora_params(16) == 4_884_480


def test_total_uses_both_sides():
    m = by_name("qwen2.5-0.5b").memory("cpu")
    assert m.total_bytes == m.rollout_bytes + max(m.train_bytes, m.load_ram_bytes)
    g = by_name("qwen2.5-0.5b").memory("cuda")
    assert g.total_bytes == g.rollout_bytes + g.train_bytes


def test_by_name_is_case_insensitive():
    assert by_name("  QWEN2.5-0.5B ") is by_name("qwen2.5-0.5b")
    assert by_name("gpt-5") is None


def test_kv_cache_term():
    s = ModelShape(1000, 10, 64, 4, 2, 16, 128, 100)
    a = catalog.rollout_bytes(s, 0)
    b = catalog.rollout_bytes(ModelShape(1000, 20, 64, 4, 2, 16, 128, 100), 0)
    per_layer = 2 * 2 * 16 * 2 * catalog.ROLLOUT_SEQS * catalog.ROLLOUT_CTX
    assert b - a == 10 * per_layer
