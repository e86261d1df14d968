"""The first load of a GGUF into torch (engine/learning/policy.py): the shortcut that parses the file once gives
the same weights as transformers' own loading, bit for bit, and leaves gguf-py as it found it."""

from __future__ import annotations

from pathlib import Path

import gguf
import torch

from engine.learning.policy import _gguf_parsed_once, load_base


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
