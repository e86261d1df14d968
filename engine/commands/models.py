"""``sapo-engine models --json``: the facts the GUI's model picker shows (see wire/models.py)."""

from __future__ import annotations

from pathlib import Path

from engine.models.accel import Placement
from engine.models.catalog import CATALOG, CatalogEntry
from engine.models.download import cached_path, offline_mode
from engine.models.hardware import Hardware, fit, recommend
from engine.commands.speed import Speed, estimate_round_s, load_cached, measure
from wire.models import GpuInfo, HardwareInfo, ModelInfo, ModelsReport, SpeedInfo

TIGHT_FRACTION = 0.75  # of the memory budget: above it a model fits, but leaves little for anything else


def build_report(hw: Hardware, speed: Speed | None, catalog: tuple[CatalogEntry, ...] = CATALOG,
                 offline: bool | None = None, placement: Placement | None = None) -> ModelsReport:
    """``placement``: where a node of this install trains and samples (engine.models.accel.placement())."""
    round_s = (lambda e: estimate_round_s(e, speed)) if speed is not None else None
    offline = offline_mode() if offline is None else offline
    # Offline, a model that needs a download cannot be used: recommend one already on this computer.
    on_disk = tuple(e for e in catalog if cached_path(e) is not None)
    rec = recommend(hw, on_disk if offline and on_disk else catalog, round_s)
    models = []
    for entry in catalog:
        f = fit(entry, hw)
        state = "no" if not f.ok else "tight" if f.needed_bytes > TIGHT_FRACTION * f.budget_bytes else "fits"
        models.append(ModelInfo(
            name=entry.name, display_name=entry.display_name, n_params=entry.n_params,
            file_size_bytes=entry.file_size_bytes, quantization=entry.quantization, bundled=entry.bundled,
            downloaded=cached_path(entry) is not None, fit=state, needed_bytes=f.needed_bytes,
            budget_bytes=f.budget_bytes, why=f.why,
            round_s=round(round_s(entry), 1) if round_s is not None else None,
            recommended=entry is rec.entry, licence=entry.licence,
        ))
    hardware = HardwareInfo(
        summary=hw.summary(), os=hw.os, cpu_name=hw.cpu_name, cpu_physical=hw.cpu_physical,
        cpu_logical=hw.cpu_logical, ram_total=hw.ram_total, ram_available=hw.ram_available, device=hw.device,
        gpus=[GpuInfo(g.name, g.total_bytes, g.torch_usable) for g in hw.gpus],
        **({"trains_on": placement.trains_on, "samples_on": placement.samples_on, "accel_fix": placement.fix}
           if placement is not None else {}),
    )
    info = (SpeedInfo(speed.gen_tokens_per_s, speed.train_tokens_per_s, speed.threads, speed.how)
            if speed is not None else None)
    reason = rec.reason + ("; offline mode is on, so only models already on this computer can be used"
                           if offline else "")
    return ModelsReport(hardware, models, rec.entry.name, reason, info, offline)


def speed_for(cache_dir: Path, threads: int, measure_now: bool) -> Speed | None:
    """The cached measurement, or a new one when asked for (and none is cached)."""
    cached = load_cached(cache_dir, threads)
    if cached is not None or not measure_now:
        return cached
    return measure(cache_dir, threads)
