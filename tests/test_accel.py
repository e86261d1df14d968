"""Training device, dtype, memory budget and llama.cpp offload, as chosen on this (CPU-only) machine."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.models import accel
from engine.errors import SapoError


def test_device_is_the_cpu_without_cuda_and_cuda_is_refused_clearly():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert accel.choose_device("auto").type == "cpu"
    assert accel.choose_device("cpu").type == "cpu"
    with pytest.raises(SapoError, match="no CUDA GPU"):
        accel.choose_device("cuda")
    with pytest.raises(SapoError, match="device must be"):
        accel.choose_device("tpu")


def test_dtype_follows_the_setting_and_the_hardware():
    cpu = torch.device("cpu")
    assert accel.choose_dtype("fp32", cpu) == torch.float32
    assert accel.choose_dtype("bf16", cpu) == torch.bfloat16
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    native = "avx512_bf16" in flags or "amx_bf16" in flags
    assert accel.native_bf16(cpu) == native  # oneDNN's check agrees with the CPU's flags
    assert accel.choose_dtype("auto", cpu) == (torch.bfloat16 if native else torch.float32)
    with pytest.raises(SapoError, match="train dtype"):
        accel.choose_dtype("fp8", cpu)


def test_memory_budget_is_the_setting_or_a_capped_share_of_free_memory():
    import psutil

    cpu = torch.device("cpu")
    assert accel.memory_budget(300, cpu) == 300 << 20
    auto = accel.memory_budget(None, cpu)
    assert 0 < auto <= accel.MAX_AUTO_BUDGET
    assert auto <= psutil.virtual_memory().available // 4 + (64 << 20)


def test_llama_cpp_offloads_only_with_a_gpu():
    assert accel.gpu_layers(None, torch.device("cpu")) == 0
    assert accel.gpu_layers(7, torch.device("cpu")) == 7
