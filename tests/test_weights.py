"""The working copy: auto means BF16 (CPUs with AVX512-BF16) or Q8_0 for a Q4_1 source, and a cached copy of another
format is never taken for it."""

from __future__ import annotations

from pathlib import Path

import llama_cpp as lc

from engine.models.working_copy import (auto_from_q4_1, auto_format, choose_format, file_identity, source_ftype,
                                        working_gguf)
from engine.sampling.llm import init_backend

FTYPE = {"q8_0": lc.LLAMA_FTYPE_MOSTLY_Q8_0, "bf16": lc.LLAMA_FTYPE_MOSTLY_BF16}


def test_auto_is_bf16_only_where_llama_cpp_decodes_on_a_cpu_with_avx512_bf16():
    cpu = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | LLAMAFILE = 1 | "
    assert auto_from_q4_1(cpu, gpu_offload=False) == "bf16"
    assert auto_from_q4_1(cpu, gpu_offload=True) == "q8_0"  # a GPU build: Q8_0, as measured before
    assert auto_from_q4_1(cpu.replace("AVX512_BF16 = 1", "AVX512_BF16 = 0"), gpu_offload=False) == "q8_0"
    assert auto_from_q4_1("CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 | ", gpu_offload=False) == "q8_0"
    # On this machine: what its own llama.cpp reports.
    init_backend()
    here = lc.llama_print_system_info().decode()
    assert auto_format() == ("bf16" if "AVX512_BF16 = 1" in here and not lc.llama_supports_gpu_offload() else "q8_0")


def test_auto_working_copy_of_the_bundled_model(bundled_gguf: Path, tmp_path: Path):
    assert source_ftype(bundled_gguf) == lc.LLAMA_FTYPE_MOSTLY_Q4_1
    fmt = auto_format()
    assert choose_format(bundled_gguf, "auto") == fmt
    assert choose_format(bundled_gguf, "as-is") is None and working_gguf(bundled_gguf, "as-is", tmp_path) == bundled_gguf
    # A Q4_0 copy of the same source from before (an old auto) sits in the cache: auto must not pick it up.
    old = tmp_path / f"{bundled_gguf.stem}.q4_0.{file_identity(bundled_gguf)}.gguf"
    old.write_bytes(b"an old Q4_0 copy")
    path = working_gguf(bundled_gguf, "auto", tmp_path)
    assert path != old and f".{fmt}." in path.name
    assert source_ftype(path) == FTYPE[fmt]
    assert working_gguf(bundled_gguf, fmt, tmp_path) == path  # cached: made once
    assert old.read_bytes() == b"an old Q4_0 copy"
    other = "q8_0" if fmt == "bf16" else "bf16"  # the other format: its own file, never this one
    again = working_gguf(bundled_gguf, other, tmp_path)
    assert again != path and source_ftype(again) == FTYPE[other]
