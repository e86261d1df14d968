"""Where and in what precision training runs, and what llama.cpp offloads: chosen from the hardware.

- device: CUDA when torch sees a GPU, else the CPU (``device`` setting: auto | cpu | cuda).
- dtype of the frozen linear weights: bf16 where matmuls have native bf16 (CPUs with
  avx512_bf16 or AMX through oneDNN, CUDA GPUs of compute capability 8+), else fp32
  (``train_dtype``: auto | bf16 | fp32). LoRA weights, optimizer state and log-softmax stay
  fp32 either way (peft keeps adapters in fp32; the trainer computes logits in fp32).
- the activation-memory budget of a training micro-batch (``train_memory_mb``), by default a
  quarter of the memory free at start on the training device, at most 512 MiB. Measured on the
  bundled model (paper preset, 8 completions a group, bf16 linears): the step's peak RSS is the
  model (~0.75 GB) plus about twice the activations kept, glibc's heap holding freed sub-MiB
  tensors; at 1 GiB a step peaked at 2.7 GiB, at 512 MiB at 1.8 GiB and took 1.3-1.6x longer
  (some micro-batches recompute)
  (docs/BENCHMARKS.md).
- llama.cpp layers on the GPU (``gpu_layers``): all of them when the installed llama.cpp was
  built with GPU offload and a CUDA GPU is present, else none.
"""

from __future__ import annotations

import psutil
import torch

from engine.errors import SapoError

MAX_AUTO_BUDGET = 512 << 20
ALL_LAYERS = 999  # llama.cpp clamps this to the model's layer count


def choose_device(setting: str = "auto") -> torch.device:
    if setting not in ("auto", "cpu", "cuda"):
        raise SapoError(f"device must be auto, cpu or cuda, got {setting!r}")
    if setting == "cuda" and not torch.cuda.is_available():
        raise SapoError("device cuda asked for, but this torch sees no CUDA GPU (a CPU-only build, or no driver)")
    if setting == "cuda" or (setting == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def native_bf16(device: torch.device) -> bool:
    """Whether bf16 matmuls run natively (faster than fp32) on this device."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported()) and torch.cuda.get_device_capability(device)[0] >= 8
    if device.type == "cpu":
        try:  # oneDNN's own check: avx512_bf16 (avx512_core + bf16 instructions) or AMX
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):
            return False
    return False


def choose_dtype(setting: str, device: torch.device) -> torch.dtype:
    if setting not in ("auto", "bf16", "fp32"):
        raise SapoError(f"train dtype must be auto, bf16 or fp32, got {setting!r}")
    if setting == "fp32":
        return torch.float32
    if setting == "bf16":
        return torch.bfloat16
    return torch.bfloat16 if native_bf16(device) else torch.float32


def memory_budget(setting_mb: int | None, device: torch.device) -> int:
    """Bytes of activations one micro-batch may keep before the trainer recomputes them."""
    if setting_mb is not None:
        return setting_mb << 20
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
    else:
        free = psutil.virtual_memory().available
    return int(min(free // 4, MAX_AUTO_BUDGET))


def gpu_layers(setting: int | None, device: torch.device) -> int:
    """llama.cpp layers to offload: the setting, else all when offload is possible, else none."""
    if setting is not None:
        return setting
    import llama_cpp

    return ALL_LAYERS if device.type == "cuda" and bool(llama_cpp.llama_supports_gpu_offload()) else 0
