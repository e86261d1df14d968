"""What this machine has, which catalog model suits it, and turning a user's choice into a model.

The recommendation must be stable: the same machine gets the same model after every
restart, or a node would hop between models (and swarms). So it depends only on fixed
hardware facts (total memory, core count, GPU memory), never on momentary free memory,
and ties are broken by catalog order.
"""

from __future__ import annotations

import ctypes
import difflib
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

import psutil

from engine.models.catalog import CATALOG, GiB, CatalogEntry, Device, MemoryNeeds, by_name, entry_from_gguf
from engine.errors import SapoError
from engine.models.modelfile import inspect_gguf
from engine.models.install_path import FIX

# How much memory a node may plan to use. The rest is for the OS, a desktop and a browser.
RAM_FRACTION = 0.8
RAM_RESERVE = 1 * GiB
GPU_FRACTION = 0.9  # of one GPU's memory; CUDA context is counted in the model's needs
UNIFIED_GPU_FRACTION = 0.7  # macOS lets the GPU wire only ~70-75% of unified memory
# A CPU-only node must finish a round in minutes, not hours: cap the model size by cores.
# 0.25B per physical core puts a 2-core box at Qwen2.5-0.5B, 8 cores at ~1.7B.
CPU_PARAMS_PER_CORE = 250_000_000


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    total_bytes: int
    torch_usable: bool  # False if seen by nvidia-smi only (CPU-only torch build)


@dataclass(frozen=True)
class Hardware:
    os: str  # "Linux 6.8.0", "Darwin 23.4.0", "Windows 11"
    machine: str  # "x86_64", "arm64", ...
    cpu_name: str
    cpu_physical: int
    cpu_logical: int
    ram_total: int  # bytes (cgroup limit if lower than the machine's)
    ram_available: int  # bytes, at detection time (shown, never used for the pick)
    gpus: tuple[GPU, ...] = ()
    apple_silicon: bool = False
    mps_available: bool = False

    @property
    def best_gpu(self) -> GPU | None:
        """The torch-usable GPU with the most memory (lowest index on ties)."""
        usable = [g for g in self.gpus if g.torch_usable]
        return max(usable, key=lambda g: (g.total_bytes, -g.index)) if usable else None

    @property
    def device(self) -> Device:
        if self.best_gpu is not None:
            return "cuda"
        if self.apple_silicon and self.mps_available:
            return "mps"
        return "cpu"

    def summary(self) -> str:
        ram = f"{_gib(self.ram_total)} RAM ({_gib(self.ram_available)} free)"
        cores = f"{self.cpu_physical} cores / {self.cpu_logical} threads"
        if self.gpus:
            gpu = ", ".join(f"{g.name} {_gib(g.total_bytes)}" + ("" if g.torch_usable else " (torch has no CUDA)")
                            for g in self.gpus)
        elif self.apple_silicon:
            gpu = "Apple GPU, unified memory" + ("" if self.mps_available else " (torch MPS unavailable)")
        else:
            gpu = "no GPU"
        return f"{self.os} {self.machine}, {self.cpu_name}, {cores}, {ram}, {gpu}"


def detect(use_torch: bool = True) -> Hardware:
    """Look at this machine. use_torch=False skips importing torch (slow; GUI-side callers)."""
    vm = psutil.virtual_memory()
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or logical
    if hasattr(os, "sched_getaffinity"):  # containers and taskset limit what we may use
        allowed = len(os.sched_getaffinity(0))
        logical, physical = min(logical, allowed), min(physical, allowed)
    system, machine = platform.system(), platform.machine().lower()
    apple = system == "Darwin" and machine == "arm64"
    gpus: tuple[GPU, ...] = ()
    mps = False
    if use_torch:
        gpus, mps = _torch_devices()
    if not gpus and not apple:
        gpus = _nvidia_smi_gpus()
    total = vm.total
    limit = _cgroup_memory_limit()
    if limit is not None and limit < total:
        total = limit
    return Hardware(
        os=f"{system} {platform.release()}".strip(),
        machine=machine,
        cpu_name=_cpu_name(system),
        cpu_physical=max(1, physical),
        cpu_logical=max(1, logical),
        ram_total=int(total),
        ram_available=int(min(vm.available, total)),
        gpus=gpus,
        apple_silicon=apple,
        mps_available=mps,
    )


def _torch_devices() -> tuple[tuple[GPU, ...], bool]:
    try:
        import torch
    except Exception:  # not installed, or a broken install: fall back to nvidia-smi
        return (), False
    gpus: list[GPU] = []
    try:
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                gpus.append(GPU(i, props.name, int(props.total_memory), True))
    except Exception:
        gpus = []
    try:
        mps = bool(torch.backends.mps.is_available())
    except Exception:
        mps = False
    return tuple(gpus), mps


def _nvidia_smi_gpus() -> tuple[GPU, ...]:
    """GPUs torch cannot use (CPU-only build): shown so the user learns why they are idle."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ()
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit() and parts[2].isdigit():
            gpus.append(GPU(int(parts[0]), parts[1], int(parts[2]) * 1024**2, False))
    return tuple(gpus)


def _cpu_name(system: str) -> str:
    try:
        if system == "Linux":
            for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "cpu model") and value.strip():
                    return value.strip()
        elif system == "Darwin":
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                 capture_output=True, text=True, timeout=2).stdout.strip()
            if out:
                return out
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _cgroup_memory_limit() -> int | None:
    """A container's memory limit (cgroup v2 or v1), if any."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # v1 reports "no limit" as a huge number
            return int(text)
    return None


# Large allocations (>= this) get their own mmap and go back to the OS when freed.
ALLOCATOR_MMAP_THRESHOLD = 1 << 20


def tune_allocator(mmap_threshold: int = ALLOCATOR_MMAP_THRESHOLD) -> bool:
    """Stop glibc's heap from hoarding freed tensors; call once at engine start, before torch work.

    glibc raises its mmap threshold after big frees, after which activation-sized tensors
    come from the heap and freed ones stay resident: a LoRA step on the 135M model peaked
    at 5.4 GB RSS instead of 1.5 GB. A fixed threshold keeps big tensors on their own
    mappings. The catalog's CPU memory figures assume this. Returns False where it does
    not apply (not glibc: macOS, Windows, musl).
    """
    if platform.system() != "Linux":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_mmap_threshold = -3  # from malloc.h
    return bool(mallopt(ctypes.c_int(m_mmap_threshold), ctypes.c_int(mmap_threshold)))


# ---------------------------------------------------------------------------------------
# What fits


@dataclass(frozen=True)
class Fit:
    entry: CatalogEntry
    device: Device
    memory: MemoryNeeds
    needed_bytes: int  # on the budgeted memory (GPU memory for cuda, RAM otherwise)
    budget_bytes: int
    ok: bool
    why: str  # "" when ok; else a short reason: "needs 9.1 GiB of 5.4 GiB RAM"


def ram_budget(hw: Hardware) -> int:
    return max(0, int(hw.ram_total * RAM_FRACTION) - RAM_RESERVE)


def fit(entry: CatalogEntry, hw: Hardware) -> Fit:
    device = hw.device
    mem = entry.memory(device)
    ram = ram_budget(hw)
    if device == "cuda":
        gpu = hw.best_gpu
        assert gpu is not None
        budget = int(gpu.total_bytes * GPU_FRACTION)
        needed = mem.rollout_bytes + mem.train_bytes
        if needed > budget:
            return Fit(entry, device, mem, needed, budget, False, f"needs {_gib(needed)} of {_gib(budget)} GPU memory")
        if mem.load_ram_bytes > ram:
            return Fit(entry, device, mem, needed, budget, False,
                       f"loading needs {_gib(mem.load_ram_bytes)} of {_gib(ram)} RAM")
        return Fit(entry, device, mem, needed, budget, True, "")
    budget = ram
    if device == "mps":
        budget = min(ram, int(hw.ram_total * UNIFIED_GPU_FRACTION))
    needed = mem.total_bytes
    if needed > budget:
        kind = "unified memory" if device == "mps" else "RAM"
        return Fit(entry, device, mem, needed, budget, False, f"needs {_gib(needed)} of {_gib(budget)} {kind}")
    if device == "cpu" and entry.n_params > cpu_param_limit(hw):
        return Fit(entry, device, mem, needed, budget, False, f"too slow for {_cores(hw.cpu_physical)}")
    return Fit(entry, device, mem, needed, budget, True, "")


def cpu_param_limit(hw: Hardware) -> int:
    return hw.cpu_physical * CPU_PARAMS_PER_CORE


@dataclass(frozen=True)
class Recommendation:
    entry: CatalogEntry
    device: Device
    fit: Fit
    reason: str  # one human sentence


# With a speed measurement, the recommendation is the largest fitting model whose rounds take
# at most this long here: a volunteer should see progress every few minutes.
TARGET_ROUND_S = 180.0


def recommend(hw: Hardware, catalog: tuple[CatalogEntry, ...] = CATALOG,
              round_s: Callable[[CatalogEntry], float] | None = None) -> Recommendation:
    """The largest catalog model (by parameters) that fits; earlier catalog entries win ties.

    ``round_s`` (expected seconds per round, see engine.commands.speed) weighs speed in: then the
    largest fitting model with rounds under TARGET_ROUND_S, or the fastest fitting one.
    """
    catalog = tuple(e for e in catalog if e.auto_pick)  # models under their own terms only when named
    if not catalog:
        raise SapoError("the model catalog is empty")
    fits = [fit(e, hw) for e in catalog]
    good = [(f.entry.n_params, -i, f) for i, f in enumerate(fits) if f.ok]
    where = _where(hw)
    if good and round_s is not None:
        quick = [g for g in good if round_s(g[2].entry) <= TARGET_ROUND_S]
        if quick:
            best = max(quick, key=lambda t: (t[0], t[1]))[2]
            slower = sorted((g[2] for g in good if g[0] > best.entry.n_params), key=lambda f: f.entry.n_params)
            limit = (f"; {slower[0].entry.name} also fits but a round would take ~{round_s(slower[0].entry) / 60:.0f} min"
                     if slower else "")
            reason = (f"{best.entry.display_name} is the largest model that fits {where} with rounds of about "
                      f"{_duration(round_s(best.entry))} here{limit}{_idle_gpu_note(hw)}")
        else:
            best = min(good, key=lambda t: (round_s(t[2].entry), -t[1]))[2]
            reason = (f"{best.entry.display_name} is the fastest model that fits {where}; a round still takes "
                      f"about {_duration(round_s(best.entry))} here{_idle_gpu_note(hw)}")
        return Recommendation(best.entry, best.device, best, reason)
    if good:
        best = max(good, key=lambda t: (t[0], t[1]))[2]
        bigger = sorted((f for f in fits if f.entry.n_params > best.entry.n_params), key=lambda f: f.entry.n_params)
        limit = f"; next larger: {bigger[0].entry.name} ({bigger[0].why})" if bigger else ""
        reason = (f"{best.entry.display_name} is the largest model that fits {where} "
                  f"(needs ~{_gib(best.needed_bytes)} of {_gib(best.budget_bytes)}){limit}{_idle_gpu_note(hw)}")
        return Recommendation(best.entry, best.device, best, reason)
    # Nothing fits comfortably: fall back to the smallest model and say so.
    smallest = min(enumerate(fits), key=lambda t: (t[1].entry.n_params, t[0]))[1]
    reason = (f"no catalog model fits {where} comfortably ({smallest.entry.display_name} {smallest.why}); "
              f"using the smallest, expect swapping or out-of-memory errors{_idle_gpu_note(hw)}")
    return Recommendation(smallest.entry, smallest.device, smallest, reason)


def _idle_gpu_note(hw: Hardware) -> str:
    idle = [g for g in hw.gpus if not g.torch_usable]
    if idle and hw.best_gpu is None:
        fix = FIX.format(path="cuda")
        return f"; GPU {idle[0].name} unused: this torch build has no CUDA (the CUDA install path: {fix})"
    return ""


def _where(hw: Hardware) -> str:
    if hw.device == "cuda":
        gpu = hw.best_gpu
        assert gpu is not None
        return f"the GPU ({gpu.name}, {_gib(gpu.total_bytes)})"
    if hw.device == "mps":
        return f"Apple Silicon with {_gib(hw.ram_total)} unified memory"
    return f"{_cores(hw.cpu_physical)} and {_gib(hw.ram_total)} RAM"


# ---------------------------------------------------------------------------------------
# Turning the user's --model choice into a model


@dataclass(frozen=True)
class ResolvedModel:
    entry: CatalogEntry  # a catalog entry, or one made from a local file's metadata
    how: Literal["recommended", "catalog", "file"]
    fit: Fit
    reason: str
    path: Path | None = None  # known without downloading (local file); else see ensure_model

    @property
    def name(self) -> str:
        return self.entry.name


def resolve_model(choice: str | None, hw: Hardware | None = None,
                  catalog: tuple[CatalogEntry, ...] = CATALOG) -> ResolvedModel:
    """None/"auto" -> recommendation; a catalog name (any case) -> that entry; a path to a
    .gguf -> that file (validated); anything else -> SapoError suggesting close names."""
    hw = hw if hw is not None else detect()
    text = (choice or "").strip()
    if text.lower() in ("", "auto"):
        rec = recommend(hw, catalog)
        return ResolvedModel(rec.entry, "recommended", rec.fit, rec.reason)
    entry = by_name(text, catalog) or _by_repo_or_file(text, catalog)
    if entry is not None:
        f = fit(entry, hw)
        reason = f"{entry.display_name}, as chosen" + ("" if f.ok else f" (warning: {f.why})")
        return ResolvedModel(entry, "catalog", f, reason)
    path = Path(text).expanduser()
    if text.lower().endswith(".gguf") or path.is_file():
        info = inspect_gguf(path)  # SapoError for missing / not GGUF / unsupported arch
        local = entry_from_gguf(info)
        f = fit(local, hw)
        reason = f"local file {info.path.name} ({info.architecture}, {info.n_params / 1e9:.2f}B params)"
        if not f.ok:
            reason += f" (warning: {f.why})"
        return ResolvedModel(local, "file", f, reason, path=info.path)
    names = [e.name for e in catalog]
    close = difflib.get_close_matches(text.lower(), names, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}?" if close else f"known models: {', '.join(names)}"
    raise SapoError(f"unknown model '{text}': {hint} (or give a path to a .gguf file; `sapo-engine models` lists all)")


def _by_repo_or_file(text: str, catalog: tuple[CatalogEntry, ...]) -> CatalogEntry | None:
    key = text.lower()
    for e in catalog:
        if (e.repo_id and key in (e.repo_id.lower(), f"{e.repo_id}/{e.filename}".lower())) or key == e.filename.lower():
            return e
    return None


# ---------------------------------------------------------------------------------------
# `sapo-engine models`


def format_catalog(hw: Hardware, catalog: tuple[CatalogEntry, ...] = CATALOG) -> str:
    """The catalog as a text table for this machine, the recommendation marked with '*'."""
    rec = recommend(hw, catalog)
    device = hw.device
    train_col = {"cpu": "train(fp32)", "cuda": "train(GPU)", "mps": "train(bf16)"}[device]
    header = ("", "name", "params", "quant", "file", "rollout", train_col, "total", "basis", "fits")
    rows = [header]
    for e in catalog:
        f = fit(e, hw)
        mem = f.memory
        train = mem.train_bytes if device == "cuda" else max(mem.train_bytes, mem.load_ram_bytes)
        rows.append((
            "*" if e is rec.entry else "",
            e.name,
            f"{e.n_params / 1e9:.2f}B",
            e.quantization,
            _gib(e.file_size_bytes),
            _gib(mem.rollout_bytes),
            _gib(train),
            _gib(f.needed_bytes),
            "measured" if mem.basis.startswith("measured") else "estimated",
            "yes" if f.ok else f"no: {f.why}",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    lines = [f"This machine: {hw.summary()}"]
    budget = rec.fit.budget_bytes
    kind = {"cpu": "RAM", "cuda": "GPU memory", "mps": "unified memory"}[device]
    lines.append(f"Planning budget: {_gib(budget)} of {kind} for rollout + training on {device}")
    lines.append("")
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1])
    lines.append("")
    lines.append(f"* recommended: {rec.reason}")
    terms = [e for e in catalog if e.licence]
    if terms:
        lines.append(f"{', '.join(e.name for e in terms)}: {terms[0].licence}; used only when named with --model.")
    lines.append("Memory needs: 'measured' rows use figures measured on a real run; others are estimates "
                 "(formula in engine/models/catalog.py; batch of 8 x 1k-token completions, LoRA micro-batch 4 x 1k).")
    return "\n".join(line.rstrip() for line in lines)


def _cores(n: int) -> str:
    return f"{n} CPU core" + ("" if n == 1 else "s")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB"
