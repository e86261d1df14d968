"""Where and in what precision training runs, and what llama.cpp offloads: chosen from the hardware.

- device (``device`` setting: auto | cpu | cuda | mps): CUDA when torch sees a GPU, else Apple's GPU
  through MPS when torch has it (macOS on Apple silicon), else the CPU.
- dtype of the frozen linear weights: bf16 where matmuls have native bf16 (CPUs with
  avx512_bf16 or AMX through oneDNN, CUDA GPUs of compute capability 8+), else fp32
  (``train_dtype``: auto | bf16 | fp32). On MPS bf16 needs macOS 14; it is chosen there because unified
  memory is what limits a Mac and hardware.py sizes Apple silicon in bf16 -- its speed against fp32 on
  MPS has not been measured (no Mac here). LoRA weights, optimizer state and log-softmax stay
  fp32 either way (peft keeps adapters in fp32; the trainer computes logits in fp32).
- the activation-memory budget of a training micro-batch (``train_memory_mb``), by default a
  quarter of the memory free at start on the training device, at most 512 MiB. "Free" is what the
  device reports: CUDA's free memory, MPS's recommended working set less what its driver holds, else
  available RAM. Measured on the bundled model (paper preset, 8 completions a group, bf16 linears):
  the step's peak RSS is the model (~0.75 GB) plus about twice the activations kept, glibc's heap
  holding freed sub-MiB tensors; at 1 GiB a step peaked at 2.7 GiB, at 512 MiB at 1.8 GiB and took
  1.3-1.6x longer (some micro-batches recompute) (docs/BENCHMARKS.md).
- llama.cpp layers on the GPU (``gpu_layers``): all of them when the installed llama.cpp was
  built with GPU offload (CUDA, or Metal on a Mac) and training has that GPU, else none.

The choices are pure functions of the machine's answers (``pick_*``), so each rule is tested with
any platform's answers substituted; the torch-calling wrappers only gather those answers.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

import psutil
import torch

from engine.errors import SapoError
from engine.models.install_path import better_path, this_machine_path
from wire.models import describe_placement

MAX_AUTO_BUDGET = 512 << 20
ALL_LAYERS = 999  # llama.cpp clamps this to the model's layer count
DEVICES = ("auto", "cpu", "cuda", "mps")


def pick_device(setting: str, cuda: bool, mps: bool) -> str:
    """The training device's type for a setting, given whether torch sees CUDA and MPS."""
    if setting not in DEVICES:
        raise SapoError(f"device must be auto, cpu, cuda or mps, got {setting!r}")
    if setting == "cuda" and not cuda:
        raise SapoError("device cuda asked for, but this torch sees no CUDA GPU (a CPU-only build, or no driver)")
    if setting == "mps" and not mps:
        raise SapoError("device mps asked for, but this torch has no MPS (needs macOS 12.3+ on Apple silicon)")
    if setting != "auto":
        return setting
    return "cuda" if cuda else "mps" if mps else "cpu"


def mps_available() -> bool:
    try:
        return bool(torch.backends.mps.is_available())
    except (AttributeError, RuntimeError):
        return False


def choose_device(setting: str = "auto") -> torch.device:
    kind = pick_device(setting, torch.cuda.is_available(), mps_available())
    if kind == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device(kind)


def pick_bf16(device_type: str, *, cuda_capability: tuple[int, int] = (0, 0), cuda_bf16: bool = False,
              cpu_onednn_bf16: bool = False, macos: tuple[int, int] = (0, 0)) -> bool:
    """Whether auto picks bf16 linears on this device, from the answers of torch and the OS."""
    if device_type == "cuda":
        return cuda_bf16 and cuda_capability[0] >= 8
    if device_type == "cpu":
        return cpu_onednn_bf16
    if device_type == "mps":
        return macos >= (14, 0)  # MPS has bf16 from macOS 14
    return False


def _macos_version() -> tuple[int, int]:
    parts = (platform.mac_ver()[0] or "0.0").split(".") + ["0"]
    return int(parts[0]), int(parts[1])


def native_bf16(device: torch.device) -> bool:
    """Whether bf16 matmuls run natively (faster than fp32) on this device (bf16 is the rule on MPS)."""
    if device.type == "cuda":
        return pick_bf16("cuda", cuda_capability=torch.cuda.get_device_capability(device),
                         cuda_bf16=bool(torch.cuda.is_bf16_supported()))
    if device.type == "cpu":
        try:  # oneDNN's own check: avx512_bf16 (avx512_core + bf16 instructions) or AMX
            onednn = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):
            onednn = False
        return pick_bf16("cpu", cpu_onednn_bf16=onednn)
    return pick_bf16(device.type, macos=_macos_version())


def choose_dtype(setting: str, device: torch.device) -> torch.dtype:
    if setting not in ("auto", "bf16", "fp32"):
        raise SapoError(f"train dtype must be auto, bf16 or fp32, got {setting!r}")
    if setting == "fp32":
        return torch.float32
    if setting == "bf16":
        return torch.bfloat16
    return torch.bfloat16 if native_bf16(device) else torch.float32


def pick_budget(setting_mb: int | None, free_bytes: int) -> int:
    """Bytes of activations one micro-batch may keep: the setting, else a quarter of free, capped."""
    if setting_mb is not None:
        return setting_mb << 20
    return int(min(max(free_bytes, 0) // 4, MAX_AUTO_BUDGET))


def mps_free(recommended_max: int, driver_allocated: int) -> int:
    """MPS's free memory: the working set macOS recommends for this process, less what its driver holds."""
    return max(0, recommended_max - driver_allocated)


def memory_budget(setting_mb: int | None, device: torch.device) -> int:
    """Bytes of activations one micro-batch may keep before the trainer recomputes them."""
    if setting_mb is not None:
        return pick_budget(setting_mb, 0)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
    elif device.type == "mps":
        free = mps_free(torch.mps.recommended_max_memory(), torch.mps.driver_allocated_memory())
    else:
        free = psutil.virtual_memory().available
    return pick_budget(None, free)


def pick_gpu_layers(setting: int | None, device_type: str, llama_offload: bool) -> int:
    """llama.cpp layers to offload: the setting, else all when training has a GPU llama.cpp can use, else none."""
    if setting is not None:
        return setting
    return ALL_LAYERS if device_type in ("cuda", "mps") and llama_offload else 0


def llama_offload() -> bool:
    """Whether the installed llama.cpp was built with GPU offload (CUDA, Metal, ...)."""
    import llama_cpp

    return bool(llama_cpp.llama_supports_gpu_offload())


def gpu_layers(setting: int | None, device: torch.device) -> int:
    return pick_gpu_layers(setting, device.type, llama_offload() if setting is None else False)


# ---------------------------------------------------------------------------------------
# Saying where a node trains and samples, and what would let it use this machine's GPU


@dataclass(frozen=True)
class Placement:
    trains_on: str  # "cuda" | "mps" | "cpu"
    samples_on: str  # "gpu" | "cpu": llama.cpp's layers offloaded or not
    fix: str = ""  # the command that lets this install use the GPU this machine has; "" when none is needed


def installed_path(torch_cuda_build: bool, system: str) -> str:
    """The install path this environment came from, read off the torch build it has."""
    if torch_cuda_build:
        return "cuda"
    return "metal" if system == "Darwin" else "cpu"


def pick_placement(device_type: str, offload_layers: int, llama_gpu: bool, installed: str, best: str) -> Placement:
    """Where training and sampling run; the fix command when this machine has a GPU this install cannot use
    (another install path is this machine's best, or llama.cpp was built without GPU offload)."""
    samples_on = "gpu" if offload_layers > 0 and device_type != "cpu" else "cpu"
    fix = ""
    if best != "cpu" and (installed != best or not llama_gpu):
        fix = better_path("", best) or ""
    return Placement(device_type, samples_on, fix)


def placement_of(device: torch.device, layers: int) -> Placement:
    """This machine's answers put through ``pick_placement`` (runs nvidia-smi once; imports llama_cpp)."""
    best = this_machine_path()  # the machine's own answer, whatever SAPO_ACCEL says
    installed = installed_path(torch.version.cuda is not None, platform.system())
    return pick_placement(device.type, layers, llama_offload(), installed, best)


def placement(device_setting: str = "auto", layers_setting: int | None = None) -> Placement:
    """Where a node with these settings would train and sample here (a device torch lacks: the CPU)."""
    try:
        device = choose_device(device_setting)
    except SapoError:
        device = torch.device("cpu")
    return placement_of(device, gpu_layers(layers_setting, device))


def describe(p: Placement) -> str:
    """One line for people: where this node trains and samples, and the fix when the GPU sits idle."""
    return describe_placement(p.trains_on, p.samples_on, p.fix)
