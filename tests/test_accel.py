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


# --- the choice rules, with any platform's answers substituted ----------------------------------------

@pytest.mark.parametrize("setting,cuda,mps,want", [
    ("auto", True, False, "cuda"), ("auto", False, True, "mps"), ("auto", False, False, "cpu"),
    ("auto", True, True, "cuda"), ("cpu", True, True, "cpu"), ("mps", False, True, "mps"), ("cuda", True, False, "cuda"),
])
def test_device_rule(setting, cuda, mps, want):
    assert accel.pick_device(setting, cuda, mps) == want


def test_device_rule_refuses_what_torch_cannot_do_in_one_line():
    with pytest.raises(SapoError, match="no MPS"):
        accel.pick_device("mps", cuda=True, mps=False)
    with pytest.raises(SapoError, match="no CUDA GPU"):
        accel.pick_device("cuda", cuda=False, mps=True)
    with pytest.raises(SapoError, match="auto, cpu, cuda or mps"):
        accel.pick_device("metal", cuda=False, mps=True)


def test_bf16_rule_per_device():
    assert accel.pick_bf16("cuda", cuda_capability=(9, 0), cuda_bf16=True)  # H100/H200
    assert not accel.pick_bf16("cuda", cuda_capability=(7, 5), cuda_bf16=True)  # T4: emulated
    assert accel.pick_bf16("cpu", cpu_onednn_bf16=True) and not accel.pick_bf16("cpu")
    assert accel.pick_bf16("mps", macos=(14, 2)) and not accel.pick_bf16("mps", macos=(13, 6))


def test_budget_rule_from_what_the_device_reports():
    gib = 1 << 30
    assert accel.pick_budget(None, 40 * gib) == accel.MAX_AUTO_BUDGET
    assert accel.pick_budget(None, gib) == gib // 4
    assert accel.pick_budget(128, 40 * gib) == 128 << 20
    # MPS: the recommended working set (e.g. 21.3 GiB on a 32 GiB Mac) less what its driver already holds
    assert accel.mps_free(recommended_max=16 * gib, driver_allocated=15 * gib) == gib
    assert accel.pick_budget(None, accel.mps_free(gib, 2 * gib)) == 0


@pytest.mark.parametrize("device,offload,want", [
    ("cuda", True, accel.ALL_LAYERS), ("mps", True, accel.ALL_LAYERS), ("cpu", True, 0), ("cuda", False, 0),
])
def test_llama_offload_rule(device, offload, want):
    assert accel.pick_gpu_layers(None, device, offload) == want
    assert accel.pick_gpu_layers(3, device, offload) == 3


def test_placement_names_the_fix_only_when_a_gpu_sits_idle():
    # a CUDA machine on the CPU install: trains and samples on the CPU, the fix is the CUDA path
    p = accel.pick_placement("cpu", 0, llama_gpu=False, installed="cpu", best="cuda")
    assert (p.trains_on, p.samples_on, p.fix) == ("cpu", "cpu", "SAPO_ACCEL=cuda scripts/setup.sh")
    assert "unused by this install" in accel.describe(p) and p.fix in accel.describe(p)
    # CUDA torch but a CPU-only llama.cpp: training uses the GPU, sampling does not; same fix
    p = accel.pick_placement("cuda", 0, llama_gpu=False, installed="cuda", best="cuda")
    assert (p.trains_on, p.samples_on, p.fix) == ("cuda", "cpu", "SAPO_ACCEL=cuda scripts/setup.sh")
    # the right install: no fix
    p = accel.pick_placement("mps", accel.ALL_LAYERS, llama_gpu=True, installed="metal", best="metal")
    assert (p.trains_on, p.samples_on, p.fix) == ("mps", "gpu", "")
    assert accel.describe(p) == "trains on the Apple GPU (MPS), samples on the GPU (llama.cpp offload)"
    # a CPU-only machine: nothing to fix
    assert accel.pick_placement("cpu", 0, llama_gpu=False, installed="cpu", best="cpu").fix == ""
    assert accel.installed_path(torch_cuda_build=True, system="Linux") == "cuda"
    assert accel.installed_path(False, "Darwin") == "metal" and accel.installed_path(False, "Linux") == "cpu"


def test_this_machine_placement_is_the_cpu_path_unchanged():
    if torch.cuda.is_available() or accel.mps_available():
        pytest.skip("this machine has a GPU")
    p = accel.placement()
    assert (p.trains_on, p.samples_on) == ("cpu", "cpu")
    assert accel.gpu_layers(None, torch.device("cpu")) == 0
