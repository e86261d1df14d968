"""From a ``model`` setting to a checked model file: the one path every command takes.

``prepare_model`` checks the task settings first (a typo must not cost a download), resolves the
choice (catalog name, path, or the best fit for this machine), downloads it if needed, inspects
and validates the GGUF (tokenizer, LoRA targets), fills the settings that depend on the model's
size (``engine.config.resolve_auto``) and makes the working copy llama.cpp and torch both load
(``working_copy``). ``sapo-engine run``, ``experiment``, ``baseline`` and ``verify`` all start here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from engine.config import NodeConfig, resolve_auto
from engine.paths import default_cache_dir, default_threads
from engine.tasks.frontier import check_levels
from engine.tasks.questions import build_mix
from wire import events as ev

DOWNLOAD_EVENT_EVERY_S = 0.25


class Reporter(Protocol):
    """Where status lines and download events go (``engine.run.event_log.EventLog`` is one)."""

    def status(self, message: str) -> None: ...

    def emit(self, event: Any) -> None: ...


@dataclass(frozen=True)
class PreparedModel:
    name: str  # catalog name, or the file's name for a path
    source: Path  # the GGUF as given or downloaded
    path: Path  # the working copy (== source for weights "as-is")
    architecture: str  # GGUF general.architecture: llama, qwen2, qwen3, gemma3
    n_params: int
    cfg: NodeConfig  # the settings, auto values resolved for this model


def check_tasks(cfg: NodeConfig) -> None:
    """The task settings, before any model is fetched ("paper" stands in for an unresolved preset)."""
    build_mix(cfg.preset or "paper", cfg.tasks, cfg.task_weights, cfg.task_config)


def prepare_model(cfg: NodeConfig, events: Reporter | None = None, *, weights: str | None = None,
                  fallback: str | None = None, threads: int | None = None) -> PreparedModel:
    """``cfg.model`` (or ``fallback`` when unset) resolved, fetched, checked, with its working copy in
    ``weights`` format (default ``cfg.weights``; "as-is" keeps the file as shipped)."""
    from engine.models.modelfile import check_lora_targets, check_tokenizer, inspect_gguf
    from engine.models.working_copy import working_gguf

    check_tasks(cfg)
    source, name = resolve_model_file(cfg.model or fallback, events)
    info = inspect_gguf(source)
    check_tokenizer(info)
    check_lora_targets(info.architecture, cfg.lora_targets)
    cfg = resolve_auto(cfg, info.n_params, threads or default_threads())
    check_levels(build_mix(cfg.preset, cfg.tasks, cfg.task_weights, cfg.task_config), cfg.task_levels)  # the preset now known
    path = working_gguf(source, weights or cfg.weights, default_cache_dir() / "models")
    return PreparedModel(name, source, path, info.architecture, info.n_params, cfg)


def resolve_model_file(choice: str | None, events: Reporter | None = None) -> tuple[Path, str]:
    """The GGUF the user asked for (catalog name, path, or the best fit), downloaded if needed.

    With no choice, a recommended model that is not downloaded yet while the Hub cannot be
    reached gives way to the bundled model at once (said in a status event): a first run
    without network trains instead of failing after huggingface_hub's retries.
    """
    from engine.models.catalog import bundled_entry
    from engine.models.download import cached_path, ensure_model, hub_reachable
    from engine.models.hardware import detect, resolve_model

    resolved = resolve_model(choice, detect())
    if resolved.path is not None:
        return Path(resolved.path), resolved.name
    if resolved.how == "recommended" and cached_path(resolved.entry) is None and not hub_reachable():
        fallback = bundled_entry()
        if events is not None:
            events.status(f"{resolved.entry.display_name} is recommended for this computer but is not downloaded "
                          f"and the model hub cannot be reached: using the bundled {fallback.display_name}")
        return Path(ensure_model(fallback)), fallback.name
    progress = download_progress(events, resolved.entry.filename) if events is not None else True
    return Path(ensure_model(resolved.entry, progress=progress)), resolved.name


def download_progress(events: Reporter, filename: str) -> Callable[[int, int | None], None]:
    """A download callback that emits ``download`` events, a few per second at most."""
    last = [0.0]

    def report(done: int, total: int | None) -> None:
        now = time.monotonic()
        finished = bool(total) and done >= (total or 0)
        if finished or now - last[0] >= DOWNLOAD_EVENT_EVERY_S:
            last[0] = now
            events.emit(ev.Download(file=filename, done_bytes=done, total_bytes=total or 0, finished=finished))

    return report
