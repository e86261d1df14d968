"""The first load of a GGUF into torch (engine/learning/policy.py): the shortcut that parses the file once gives
the same weights as transformers' own loading, bit for bit, and leaves gguf-py as it found it; the cache it writes
gives them back bit for bit too, in half the disk for a BF16 file."""

from __future__ import annotations

from pathlib import Path

import gguf
import torch
from safetensors import safe_open

from engine.learning.policy import _gguf_parsed_once, load_base
from engine.models.working_copy import working_gguf as make_working_copy


def stored(cache: Path) -> dict[str, torch.Tensor]:
    (weights,) = cache.glob("*/model.safetensors")
    with safe_open(weights, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def test_the_shortcut_loads_the_same_weights_and_puts_gguf_back(working_gguf: Path, tmp_path: Path):
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    fast = load_base(working_gguf, tmp_path / "cache").state_dict()  # no cache yet: the GGUF, with the shortcut
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, name_map)
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(working_gguf.parent, gguf_file=working_gguf.name,
                                                 dtype=torch.float32).state_dict()
    assert fast.keys() == plain.keys() and len(fast) > 100
    assert all(torch.equal(fast[k], plain[k]) for k in fast)
    cached = load_base(working_gguf, tmp_path / "cache").state_dict()  # the cache written by the first load
    assert all(torch.equal(fast[k], cached[k]) for k in fast)


def test_inside_the_shortcut_a_file_is_parsed_once(working_gguf: Path):
    with _gguf_parsed_once():
        first, again = gguf.GGUFReader(working_gguf), gguf.GGUFReader(str(working_gguf))
        assert first is again
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 30) is gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 30)
    assert gguf.GGUFReader(working_gguf) is not first  # outside it, gguf-py is itself again


def test_the_cache_of_a_bf16_file_is_bf16_and_gives_back_the_same_weights(bundled_gguf: Path, model_cache: Path,
                                                                         tmp_path: Path):
    bf16 = make_working_copy(bundled_gguf, "bf16", model_cache)
    first = load_base(bf16, tmp_path / "cache").state_dict()
    on_disk = stored(tmp_path / "cache")
    matrices = [k for k in on_disk if k.endswith("_proj.weight")]
    assert len(matrices) == 7 * 30 and all(on_disk[k].dtype == torch.bfloat16 for k in matrices)
    assert "model.embed_tokens.weight" in on_disk and "lm_head.weight" not in on_disk  # tied: stored once
    size = sum(t.numel() * t.element_size() for t in on_disk.values())
    assert size < 0.55 * sum(t.numel() * 4 for t in on_disk.values())
    again = load_base(bf16, tmp_path / "cache").state_dict()
    assert first.keys() == again.keys() and all(again[k].dtype == torch.float32 for k in again)
    assert all(torch.equal(first[k], again[k]) for k in first)


def test_the_cache_keeps_fp32_where_bf16_would_round(bundled_gguf: Path, model_cache: Path, tmp_path: Path):
    q8 = make_working_copy(bundled_gguf, "q8_0", model_cache)  # a scale times an int8: rarely a bf16 value
    first = load_base(q8, tmp_path / "cache").state_dict()
    on_disk = stored(tmp_path / "cache")
    matrices = [k for k in on_disk if k.endswith("_proj.weight")]
    assert all(on_disk[k].dtype == torch.float32 for k in matrices)
    for name, t in on_disk.items():  # whatever went to bf16 was exact there
        assert t.dtype == torch.float32 or torch.equal(t.float(), first[name]), name
    again = load_base(q8, tmp_path / "cache").state_dict()
    assert all(torch.equal(first[k], again[k]) for k in first)
