"""A node's settings: one dataclass, read from a TOML file and command-line flags.

Precedence: built-in defaults < ``--config FILE`` < flags. Fields left ``None`` are
"auto" and are filled from the model's size by ``resolve_auto`` once the model is known
(tiny models get the easy preset and shorter answers). Every constraint is checked once,
in ``validate``, with a one-line ``SapoError``.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from engine.errors import SapoError

TINY_PARAMS = 500_000_000  # below this, a model gets the "tiny" defaults


@dataclass
class NodeConfig:
    # --- model ---
    model: str | None = None  # catalog name or path to a .gguf; None = best fit for this machine
    weights: str = "auto"  # working weight format: auto | as-is | q4_0 | q8_0 (auto: Q4_1 -> Q4_0, see BENCHMARKS)
    # --- tasks ---
    preset: str | None = None  # easy | paper; None = easy for tiny models, else paper
    tasks: list[str] | None = None  # reasoning-gym dataset names; None = the preset's
    task_weights: dict[str, float] = field(default_factory=dict)
    task_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    fewshot: int | None = None  # worked examples per prompt; None = 2 for tiny models, else 0
    format_bonus: float | None = None  # reward for a well-formed <answer> tag; None = 0.1 tiny, else 0
    # --- a round (the paper's I, J, L) ---
    local_groups: int = 4  # I: own question groups trained per round
    external_groups: int = 4  # J: groups sampled from the swarm (budget I + J is kept offline)
    completions: int | None = None  # L: answers per question; None = 4 tiny, else 8
    max_tokens: int | None = None  # per answer; None = 96 tiny, else 256
    temperature: float = 1.0  # on-policy: no truncation unless top_k / top_p are set
    top_k: int = 0
    top_p: float = 1.0
    stop_at_answer: bool = True  # end an answer at its first </answer>: the reward is already decided
    threads: int | None = None  # llama.cpp and torch threads; None = physical cores
    seed: int = 0
    # --- training (GRPO + LoRA) ---
    learning_rate: float = 3e-4
    optimizer: str = "adamw"  # adamw | adam | sgd (the paper used Adam)
    # RL updates carry little information per round; rank 16 on all linear layers is ample at
    # every size here (LoRA rank matters far less for RL than for supervised fine-tuning).
    lora_rank: int = 16
    lora_alpha: float = 32.0
    lora_dropout: float = 0.0
    lora_targets: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    iterations: int = 1  # policy updates per round on the same rollouts (>1 makes clipping act)
    micro_batch: int | None = None  # sequences per forward/backward; None = 8 under 0.5B, 4 under 2B, else 2
    grad_clip: float = 1.0
    eps_low: float = 0.2  # PPO clip range below 1 (paper, DAPO)
    eps_high: float = 0.28  # and above 1 (DAPO "clip-higher")
    weight_decay: float = 0.0
    # --- evaluation ---
    eval_every: int = 10  # rounds between held-out evaluations; 0 = never
    eval_per_task: int = 16  # held-out questions per task
    # --- swarm ---
    relay: str | None = None  # ws://host:port; None or offline = train alone
    swarm: str = "public"
    token: str | None = None
    offline: bool = False
    external_any_task: bool = False  # accept external groups of tasks outside our own mix


def _fields() -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(NodeConfig)}


def load_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise SapoError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SapoError(f"config file {path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise SapoError(f"cannot read config file {path}: {exc.strerror}") from None
    # Flat keys or [node]-style tables are both fine; tables that are settings stay as they are.
    flat: dict[str, Any] = {}
    for key, value in data.items():
        key = key.replace("-", "_")
        if isinstance(value, dict) and key not in ("task_weights", "task_config"):
            flat.update({k.replace("-", "_"): v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def build_config(file_values: dict[str, Any], flag_values: dict[str, Any]) -> NodeConfig:
    """Defaults, then the file, then flags; types checked, constraints validated."""
    known = _fields()
    merged: dict[str, Any] = {}
    for source, values in (("config file", file_values), ("flags", flag_values)):
        for key, value in values.items():
            if key not in known:
                raise SapoError(f"unknown setting {key!r} in {source}")
            if value is not None:
                merged[key] = value
    try:
        cfg = msgspec.convert(merged, NodeConfig, strict=False)
    except msgspec.ValidationError as exc:
        raise SapoError(f"invalid setting: {exc}") from None
    validate(cfg)
    return cfg


def validate(cfg: NodeConfig) -> None:
    def need(ok: bool, message: str) -> None:
        if not ok:
            raise SapoError(message)

    need(cfg.weights in ("auto", "as-is", "q4_0", "q8_0"), f"weights must be auto, as-is, q4_0 or q8_0, got {cfg.weights!r}")
    need(cfg.preset in (None, "easy", "paper"), f"preset must be 'easy' or 'paper', got {cfg.preset!r}")
    need(cfg.local_groups >= 0, f"local groups (I) must be >= 0, got {cfg.local_groups}")
    need(cfg.external_groups >= 0, f"external groups (J) must be >= 0, got {cfg.external_groups}")
    need(cfg.local_groups + cfg.external_groups >= 1, "the round budget I + J must be at least 1")
    need(cfg.completions is None or 2 <= cfg.completions <= 64,
         f"completions (L) must be between 2 and 64, got {cfg.completions}")
    need(cfg.max_tokens is None or 1 <= cfg.max_tokens <= 8192, f"max tokens must be 1..8192, got {cfg.max_tokens}")
    need(cfg.temperature > 0, f"temperature must be > 0, got {cfg.temperature}")
    need(cfg.top_k >= 0, f"top_k must be >= 0, got {cfg.top_k}")
    need(0 < cfg.top_p <= 1, f"top_p must be in (0, 1], got {cfg.top_p}")
    need(cfg.threads is None or 1 <= cfg.threads <= 1024, f"threads must be >= 1, got {cfg.threads}")
    need(cfg.seed >= 0, f"seed must be >= 0, got {cfg.seed}")
    need(cfg.fewshot is None or 0 <= cfg.fewshot <= 8, f"fewshot must be 0..8, got {cfg.fewshot}")
    need(cfg.optimizer in ("adamw", "adam", "sgd"), f"optimizer must be adamw, adam or sgd, got {cfg.optimizer!r}")
    need(cfg.learning_rate > 0, f"learning rate must be > 0, got {cfg.learning_rate}")
    need(cfg.lora_rank >= 1, f"LoRA rank must be >= 1, got {cfg.lora_rank}")
    need(cfg.lora_alpha > 0, f"LoRA alpha must be > 0, got {cfg.lora_alpha}")
    need(0 <= cfg.lora_dropout < 1, f"LoRA dropout must be in [0, 1), got {cfg.lora_dropout}")
    need(len(cfg.lora_targets) > 0, "LoRA targets must name at least one module")
    need(cfg.iterations >= 1, f"iterations must be >= 1, got {cfg.iterations}")
    need(cfg.micro_batch is None or cfg.micro_batch >= 1, f"micro batch must be >= 1, got {cfg.micro_batch}")
    need(cfg.grad_clip > 0, f"grad clip must be > 0, got {cfg.grad_clip}")
    need(0 <= cfg.eps_low < 1 and cfg.eps_high >= 0, "clip ranges must satisfy 0 <= eps_low < 1 and eps_high >= 0")
    need(cfg.eval_every >= 0, f"eval every must be >= 0, got {cfg.eval_every}")
    need(cfg.eval_per_task >= 1, f"eval questions per task must be >= 1, got {cfg.eval_per_task}")
    need(bool(cfg.swarm) and len(cfg.swarm) <= 64, "swarm name must be 1..64 characters")


def resolve_auto(cfg: NodeConfig, n_params: int) -> NodeConfig:
    """Fill the auto (None) fields from the model's size."""
    tiny = n_params < TINY_PARAMS
    return dataclasses.replace(
        cfg,
        preset=cfg.preset or ("easy" if tiny else "paper"),
        fewshot=cfg.fewshot if cfg.fewshot is not None else (2 if tiny else 0),
        format_bonus=cfg.format_bonus if cfg.format_bonus is not None else (0.1 if tiny else 0.0),
        completions=cfg.completions or (4 if tiny else 8),
        max_tokens=cfg.max_tokens or (96 if tiny else 256),
        micro_batch=cfg.micro_batch or (8 if tiny else 4 if n_params < 2_000_000_000 else 2),
    )


# Flags of `sapo-engine run` that are settings (their argparse dest is the NodeConfig field).
SETTING_FLAGS = (
    "model", "weights", "preset", "tasks", "local_groups", "external_groups", "completions", "max_tokens",
    "temperature", "threads", "seed", "fewshot", "format_bonus", "learning_rate", "optimizer", "lora_rank", "iterations",
    "micro_batch", "eval_every", "eval_per_task", "relay", "swarm", "token", "offline",
)


def flag_settings(args: Any) -> dict[str, Any]:
    return {k: getattr(args, k) for k in SETTING_FLAGS if getattr(args, k, None) is not None}
