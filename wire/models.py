"""``sapo-engine models --json``: this machine, the catalog's fit on it, the recommendation
(and ``sapo-engine identity --json``: this node's id and name).

The GUI decides nothing about hardware itself (it never imports torch): it runs the engine
with ``models --json`` and reads this. Same compatibility rules as ``wire.events``: fields
are only added, with defaults. Imports msgspec only.
"""

from __future__ import annotations

from typing import Literal

import msgspec


class GpuInfo(msgspec.Struct, frozen=True):
    name: str
    memory_bytes: int
    usable: bool  # False: seen by nvidia-smi only (a CPU-only torch build)


class HardwareInfo(msgspec.Struct, frozen=True):
    summary: str  # one line for people
    os: str
    cpu_name: str
    cpu_physical: int
    cpu_logical: int
    ram_total: int
    ram_available: int
    device: Literal["cpu", "cuda", "mps"]
    gpus: list[GpuInfo] = []
    # Where a node of this install trains (torch: "cuda" | "mps" | "cpu") and samples (llama.cpp: "gpu" | "cpu"),
    # the same for every model; accel_fix: the command that lets it use this machine's idle GPU ("" when none).
    trains_on: str = ""
    samples_on: str = ""
    accel_fix: str = ""


Fit = Literal["fits", "tight", "no"]


class ModelInfo(msgspec.Struct, frozen=True):
    name: str  # what `--model` takes
    display_name: str
    n_params: int
    file_size_bytes: int
    quantization: str
    bundled: bool
    downloaded: bool  # on disk already: no download needed
    fit: Fit  # "tight": fits, but uses most of the budget
    needed_bytes: int
    budget_bytes: int
    why: str = ""  # why not, when fit == "no"
    round_s: float | None = None  # expected seconds per round here; None when not measured
    recommended: bool = False
    licence: str = ""  # terms the user accepts by choosing it, where not a plain open licence


class SpeedInfo(msgspec.Struct, frozen=True):
    gen_tokens_per_s: float
    train_tokens_per_s: float
    threads: int
    how: str


class ModelsReport(msgspec.Struct, frozen=True):
    hardware: HardwareInfo
    models: list[ModelInfo]
    recommended: str
    reason: str
    speed: SpeedInfo | None = None
    # Downloads are off here (offline mode): only models on disk can be used; the recommendation is one of them.
    offline: bool = False


class NodeIdentity(msgspec.Struct, frozen=True):
    """``sapo-engine identity --json``: who this node is (made on first use)."""

    node_id: str
    node_name: str


def describe_placement(trains_on: str, samples_on: str, accel_fix: str = "") -> str:
    """One line for people (engine terminal, wizard, dashboard): where a node trains and samples, and the
    command that puts this machine's idle GPU to work."""
    where = {"cuda": "the NVIDIA GPU (CUDA)", "mps": "the Apple GPU (MPS)", "cpu": "the CPU"}
    line = (f"trains on {where.get(trains_on, trains_on)}, samples on "
            + ("the GPU (llama.cpp offload)" if samples_on == "gpu" else "the CPU (llama.cpp)"))
    return line + (f"; this computer's GPU is unused by this install, to use it: {accel_fix}" if accel_fix else "")


_decoder = msgspec.json.Decoder(ModelsReport)


def decode_report(data: str | bytes) -> ModelsReport:
    """Raises ``msgspec.DecodeError`` for anything else."""
    return _decoder.decode(data)


def encode_report(report: ModelsReport) -> bytes:
    return msgspec.json.encode(report)
