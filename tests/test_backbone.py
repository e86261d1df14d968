"""The sampling context's memory, checked before any work: its size from the real GGUF's shape, and the one-line
refusal when settings within their bounds would take most of the computer's memory."""

from __future__ import annotations

import dataclasses

import pytest

from engine.config import NodeConfig, resolve_auto
from engine.errors import SapoError
from engine.models.modelfile import inspect_gguf
from engine.run.backbone import check_context_fits, context_bytes, context_cells

GIB = 2**30


def test_a_context_cell_of_the_bundled_model_holds_a_key_and_a_value_per_layer_and_kv_head(bundled_gguf):
    info = inspect_gguf(bundled_gguf)
    assert (info.n_layers, info.n_head_kv, info.head_dim) == (30, 3, 64)  # SmolLM2-135M
    assert context_bytes(info, 1) == 30 * 2 * 3 * 64 * 2  # f16 keys and values


def test_cells_follow_the_round_up_to_the_most_a_batch_holds():
    cfg = resolve_auto(NodeConfig(), 135_000_000)
    assert context_cells(cfg) == 8 * 4 * 96 + 8192  # I + J groups of L answers of 96 tokens, and the prompts
    big = dataclasses.replace(cfg, completions=64, max_tokens=8192)
    assert context_cells(big) == 64 * 8192 + 8192  # 512 sequences, 64 at a time


def test_settings_whose_context_takes_most_of_the_free_memory_are_refused_in_one_line(bundled_gguf):
    info = inspect_gguf(bundled_gguf)
    cfg = dataclasses.replace(resolve_auto(NodeConfig(), 135_000_000), completions=64, max_tokens=8192)
    need = context_bytes(info, context_cells(cfg))
    assert 11 * GIB < need < 12 * GIB  # what such a node allocated before its first round, and swapped
    with pytest.raises(SapoError) as err:
        check_context_fits(need, 16 * GIB, cfg)
    assert str(err.value) == ("64 answers of up to 8192 tokens a question need 11.4 GiB for sampling alone, and "
                              "16.0 GiB of memory is free: lower max_tokens or completions")
    check_context_fits(need, 24 * GIB, cfg)  # at most half of what is free: it goes on
    default = resolve_auto(NodeConfig(), 135_000_000)
    check_context_fits(context_bytes(info, context_cells(default)), 1 * GIB, default)  # 248 MiB: fine on 1 GiB free
