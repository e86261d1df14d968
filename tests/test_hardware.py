"""engine.models.hardware: detection, the stable recommendation, resolving --model, the table."""

from __future__ import annotations

import subprocess
import sys
import types
from dataclasses import replace

import pytest

from engine.models import hardware
from engine.models.catalog import CATALOG, GiB, by_name
from engine.errors import SapoError
from engine.models.hardware import GPU, Hardware, detect, fit, format_catalog, recommend, resolve_model
from engine.models.modelfile import bundled_model_path


def cpu_box(cores: int = 2, ram_gib: float = 24, free_gib: float = 20) -> Hardware:
    return Hardware("Linux 6.8", "x86_64", "Test CPU", cores, cores, int(ram_gib * GiB), int(free_gib * GiB))


def gpu_box(vram_gib: float, ram_gib: float = 64, name: str = "Test GPU", cores: int = 16) -> Hardware:
    return replace(cpu_box(cores, ram_gib), gpus=(GPU(0, name, int(vram_gib * GiB), True),))


def mac(ram_gib: float = 16) -> Hardware:
    return Hardware("Darwin 23.4", "arm64", "Apple M2", 8, 8, int(ram_gib * GiB), int(ram_gib * GiB / 2),
                    apple_silicon=True, mps_available=True)


# --- detection ----------------------------------------------------------------------


def test_detect_this_machine():
    hw = detect(use_torch=False)
    assert hw.cpu_physical >= 1 and hw.cpu_logical >= hw.cpu_physical
    assert 0 < hw.ram_available <= hw.ram_total
    assert hw.cpu_name and hw.os
    assert hw.device in ("cpu", "cuda", "mps")
    assert "RAM" in hw.summary()


def test_detect_cuda_through_torch(monkeypatch):
    props = types.SimpleNamespace(name="Fake H100", total_memory=80 * GiB)
    cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 2,
                                 get_device_properties=lambda i: props)
    fake = types.SimpleNamespace(cuda=cuda, backends=types.SimpleNamespace(
        mps=types.SimpleNamespace(is_available=lambda: False)))
    monkeypatch.setitem(sys.modules, "torch", fake)
    hw = detect()
    assert [g.name for g in hw.gpus] == ["Fake H100", "Fake H100"]
    assert hw.device == "cuda" and hw.best_gpu.index == 0  # equal GPUs: lowest index


def test_nvidia_smi_fallback(monkeypatch):
    monkeypatch.setattr(hardware.shutil, "which", lambda exe: "/usr/bin/nvidia-smi")
    out = "0, NVIDIA GeForce RTX 3060, 12288\n1, NVIDIA GeForce RTX 3090, 24576\n"
    monkeypatch.setattr(hardware.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=out, stderr=""))
    gpus = hardware._nvidia_smi_gpus()
    assert [(g.index, g.total_bytes, g.torch_usable) for g in gpus] == [(0, 12 * GiB, False), (1, 24 * GiB, False)]


def test_gpu_torch_cannot_use_means_cpu_plan():
    hw = replace(cpu_box(4, 32), gpus=(GPU(0, "RTX 3060", 12 * GiB, False),))
    rec = recommend(hw)
    assert rec.device == "cpu"
    assert "no CUDA" in rec.reason


# --- recommendation -------------------------------------------------------------------


@pytest.mark.parametrize(("hw", "expected", "device"), [
    (cpu_box(2, 24), "qwen2.5-0.5b", "cpu"),  # this project's reference box: cores limit it
    (cpu_box(4, 8, free_gib=3), "qwen2.5-0.5b", "cpu"),  # 8 GiB laptop: memory limits it
    (cpu_box(16, 64), "llama3.2-3b", "cpu"),
    (gpu_box(24), "qwen3-4b", "cuda"),
    (gpu_box(80, ram_gib=256), "qwen2.5-7b", "cuda"),
    (gpu_box(8, ram_gib=32), "qwen2.5-1.5b", "cuda"),
    (mac(16), "qwen2.5-1.5b", "mps"),
])
def test_recommend_sensible(hw, expected, device):
    rec = recommend(hw)
    assert (rec.entry.name, rec.device) == (expected, device), rec.reason
    assert rec.fit.ok and rec.entry.display_name in rec.reason


def test_recommend_is_stable_and_ignores_free_memory():
    a = recommend(cpu_box(2, 24, free_gib=20))
    b = recommend(cpu_box(2, 24, free_gib=1))
    assert a == b == recommend(cpu_box(2, 24, free_gib=20))


def test_recommend_grows_with_hardware():
    small, big = recommend(gpu_box(12)), recommend(gpu_box(48))
    assert small.entry.n_params <= big.entry.n_params


def test_gpu_box_with_little_ram_for_loading():
    # 80 GB GPU but 16 GiB RAM: the 7B's fp32 dequantization during loading does not fit.
    rec = recommend(gpu_box(80, ram_gib=16))
    assert rec.entry.n_params < by_name("qwen2.5-7b").n_params
    assert "loading needs" in fit(by_name("qwen2.5-7b"), gpu_box(80, ram_gib=16)).why


def test_nothing_fits_falls_back_to_smallest_with_warning():
    rec = recommend(cpu_box(1, 2))
    assert rec.entry.bundled and not rec.fit.ok
    assert "no catalog model fits" in rec.reason


def test_ties_broken_by_catalog_order():
    a, b = by_name("qwen2.5-0.5b"), by_name("smollm2-360m")
    twin = replace(b, name="twin", n_params=a.n_params, shape=replace(b.shape, n_params=a.n_params))
    assert recommend(cpu_box(2, 24), (a, twin)).entry is a
    assert recommend(cpu_box(2, 24), (twin, a)).entry is twin


def test_empty_catalog():
    with pytest.raises(SapoError):
        recommend(cpu_box(), ())


# --- resolve_model --------------------------------------------------------------------


def test_resolve_default_is_recommendation():
    hw = cpu_box(2, 24)
    for choice in (None, "", "auto", "AUTO"):
        r = resolve_model(choice, hw)
        assert r.how == "recommended" and r.entry == recommend(hw).entry


def test_resolve_by_name_any_case():
    r = resolve_model("Qwen2.5-1.5B", cpu_box(2, 24))
    assert r.how == "catalog" and r.entry is by_name("qwen2.5-1.5b")
    assert not r.fit.ok and "warning" in r.reason  # allowed, but the user is told it is too slow
    assert resolve_model("smollm2-135m", cpu_box()).entry.bundled


def test_resolve_by_repo_id():
    r = resolve_model("Qwen/Qwen3-0.6B-GGUF", cpu_box())
    assert r.entry is by_name("qwen3-0.6b")


def test_resolve_local_path():
    r = resolve_model(str(bundled_model_path()), cpu_box())
    assert r.how == "file" and r.path == bundled_model_path().resolve()
    assert r.entry.source == "local" and r.entry.architecture == "llama" and r.fit.ok


def test_resolve_missing_path():
    with pytest.raises(SapoError, match="not found"):
        resolve_model("/nowhere/model.gguf", cpu_box())


def test_resolve_typo_suggests():
    with pytest.raises(SapoError, match=r"unknown model 'qwen2\.5-05b': did you mean .*qwen2\.5-0\.5b") as err:
        resolve_model("qwen2.5-05b", cpu_box())
    assert "\n" not in str(err.value)


def test_resolve_nonsense_lists_names():
    with pytest.raises(SapoError, match="known models: smollm2-135m"):
        resolve_model("xyzzy", cpu_box())


# --- table ------------------------------------------------------------------------------


def test_format_catalog():
    hw = cpu_box(2, 24)
    text = format_catalog(hw)
    names = {e.name for e in CATALOG}
    rows = [line for line in text.splitlines() if line.lstrip("* ").split(" ")[0] in names]
    assert len(rows) == len(CATALOG)
    marked = [r for r in rows if r.startswith("*")]
    assert len(marked) == 1 and " qwen2.5-0.5b " in marked[0]
    assert "fits" in text and "recommended:" in text
    assert any("too slow" in r for r in rows) and any(r.rstrip().endswith("yes") for r in rows)
    assert any("measured" in r for r in rows) and any("estimated" in r for r in rows)


def test_format_catalog_gpu():
    text = format_catalog(gpu_box(24))
    assert "GPU memory" in text and "train(GPU)" in text


def test_tune_allocator(monkeypatch):
    if hardware.platform.system() == "Linux" and hardware.platform.libc_ver()[0] == "glibc":
        assert hardware.tune_allocator() is True
    monkeypatch.setattr(hardware.platform, "system", lambda: "Darwin")
    assert hardware.tune_allocator() is False
