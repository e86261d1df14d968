"""A node's settings: ``NodeConfig``, the one place each setting is written.

Each field carries its default, its help text, its command-line flag and, where there is
one, the source of the default (the paper, DAPO, a measurement here), as TRL's GRPO config
does. The ``sapo-engine run`` flags (``add_setting_flags``) and the TOML reader are generated
from these fields, and the GUI reads the same metadata for its tooltips.

Precedence: built-in defaults < ``--config FILE`` < flags. Fields whose default is ``None``
and that are marked ``auto`` are filled from the model's size by ``resolve_auto`` once the
model is known (tiny models get the easy preset and shorter answers); after that none is
left. Every constraint, cross-field ones included, is checked once, in ``validate``, with a
one-line ``SapoError``.

Torch-free on purpose: the GUI imports this module to write the TOML file the engine reads.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from engine.errors import SapoError
from wire.power_rules import parse_schedule
from wire.protocol import MAX_AGE_S, MAX_FORMAT_BONUS, swarm_name_problem

TINY_PARAMS = 500_000_000  # below this, a model gets the "tiny" defaults
EXTERNAL_SELECTIONS = ("uniform", "top", "useful", "rare")  # engine/sharing/selection.py ranks by each
WEIGHT_CHOICES = ("auto", "as-is", "q4_0", "q8_0", "bf16")  # working formats (engine/models/working_copy.py)


def setting(default: Any = None, help: str = "", *, flag: str | None = "", source: str = "", auto: bool = False,
            factory: Any = None) -> Any:
    """A NodeConfig field. ``flag``: "" = ``--field-name``, None = TOML only. ``auto``: None is filled by resolve_auto."""
    meta = {"help": help, "flag": flag, "source": source, "auto": auto}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


PRIORITIES = ("low", "normal")  # engine/run/priority.py
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class NodeConfig:
    # --- model ---
    model: str | None = setting(None, "catalog name (see 'sapo-engine models') or path to a .gguf file; "
                                      "unset: the best fit for this machine")
    weights: str = setting("auto", "working weight format: auto, as-is, q4_0, q8_0 or bf16",
                           source="measured here (docs/BENCHMARKS.md): auto turns Q4_1 into BF16 where llama.cpp "
                                  "runs on a CPU with AVX512-BF16, else Q8_0: the fastest format that answers as "
                                  "well as the source")
    # --- tasks ---
    preset: str | None = setting(None, "task preset: easy or paper (auto: easy for models under 0.5B)", auto=True)
    tasks: list[str] | None = setting(None, "comma-separated reasoning-gym datasets (unset: the preset's)")
    task_weights: dict[str, float] = setting(help="relative draw weight per task", flag=None, factory=dict)
    task_config: dict[str, dict[str, Any]] = setting(help="reasoning-gym settings per task", flag=None, factory=dict)
    fewshot: int | None = setting(None, "worked examples in each prompt (auto: 2 for tiny models, else 0)", auto=True,
                                  source="measured here: tiny models rarely use the answer tag without examples")
    prompts: str = setting("new", "how examples are shown: new (per task, the measured best: a short working "
                                  "before the answer tag), old (bare tagged answers, system prompt), worked or "
                                  "worked-nosys (every task alike)",
                           source="measured here (docs/BENCHMARKS.md, issue 10)")
    format_bonus: float | None = setting(
        None, f"extra reward for a well-formed answer tag, at most {MAX_FORMAT_BONUS} (auto: 0.1 tiny, else 0)",
        auto=True, source="departure from the paper (which has none), for models that start at ~0 reward")
    frontier: bool = setting(
        False, "keep each task near the difficulty where this node answers about half right: levels of "
               "reasoning-gym's curricula move one step up or down with the own success rate (the held-out "
               "set stays at the mix's settings); with useful selection, swarm groups at this node's levels first",
        source="issue 21: groups without reward spread train nothing")
    task_levels: dict[str, int] = setting(
        help="starting difficulty level per task (0 = the mix's settings, up to the top of the task's frontier "
             "ladder within the size caps); with frontier off the tasks stay there", flag=None, factory=dict)
    # --- a round (the paper's I, J, L) ---
    local_groups: int = setting(4, "I: own question groups per round", flag="--local", source="paper (4/4 was best)")
    external_groups: int = setting(4, "J: groups from the swarm per round (the budget I + J is kept offline)",
                                   flag="--external", source="paper (4/4 was best)")
    completions: int | None = setting(None, "L: answers per question (auto: 4 tiny, else 8)", auto=True,
                                      source="paper: L = 8")
    max_tokens: int | None = setting(None, "new tokens per answer (auto: 96 tiny, else 256)", auto=True)
    temperature: float = setting(1.0, "sampling temperature; 1 = on-policy", source="paper")
    top_k: int = setting(0, "sample from the k likeliest tokens only (0 = off: on-policy)")
    top_p: float = setting(1.0, "nucleus sampling (1 = off: on-policy)")
    stop_at_answer: bool = setting(True, "end an answer at its first </answer>: the reward is already decided")
    threads: int | None = setting(None, "CPU threads for llama.cpp and torch (auto: physical cores)", auto=True)
    cpu_limit: int = setting(100, "use at most this % of the CPU time of its threads: the node sleeps between "
                                  "steps (BOINC's CPU throttle; 100 = no limit)")
    priority: str = setting("low", "CPU priority: low (the computer's other programs come first, as BOINC and "
                                   "Folding@home run) or normal; chosen at start",
                            source="measured here (docs/BENCHMARKS.md, \"A node beside other CPU work\")")
    # Headless only: the app applies its own Preferences by pausing and resuming the engine (app/power.py).
    schedule: str | None = setting(None, "train only between these times of day, HH:MM-HH:MM local time (22:00-07:00 "
                                         "runs over midnight); outside them the node waits between rounds")
    pause_on_battery: bool = setting(False, "wait between rounds while the computer runs on battery")
    max_other_cpu: int = setting(0, "wait between rounds while other programs use more than this % of all cores' "
                                    "time (BOINC's \"suspend when non-BOINC CPU usage is above\"); 0 = never")
    seed: int = setting(0, "seed of this node's question and sampling streams")
    # --- training (GRPO + LoRA) ---
    # By how the node trains (learning_rate_for): alone, 1e-4, not 3e-4 (docs/BENCHMARKS.md, "Stable updates":
    # 3e-4 let held-out greedy fall and clipped half its updates' gradients); with peers' groups, 2e-4 (run 7,
    # docs/RESULTS.md: 3 seeds x 8 agents x 40 rounds, 1.10x the reward of the same swarm at 1e-4, held-out level,
    # where alone at 2e-4 ended 0.04 lower on new questions: more groups with spread, a steadier gradient). Only
    # with the default way of using peers' groups (SWARM_RATE_METHOD): the paper's uniform sharing at 2e-4 did
    # worse than alone on new questions (run 8).
    learning_rate: float | None = setting(
        None, "LoRA learning rate (auto: 2e-4 when the node trains on peers' groups the default way, else 1e-4)", flag="--lr",
        auto=True, source="measured here (docs/RESULTS.md, runs 6 and 7)")
    # A node set up for a swarm whose relay is unreachable trains on its own groups only, as alone does, so such
    # a round takes alone's step (Node._learning_rate); with the rate set by hand, every round takes that one.
    learning_rate_alone: float | None = setting(
        None, "learning rate of a round trained while the relay is unreachable (auto: 1e-4 when the learning "
              "rate is auto, else the learning rate)", flag=None, auto=True,
        source="measured here (docs/RESULTS.md, run 7: alone at 2e-4 ended lower on new questions)")
    optimizer: str = setting("adamw", "adamw, adam or sgd", source="the paper used Adam")
    # RL updates carry little information per round; rank 16 on all linear layers is ample at
    # every size here (LoRA rank matters far less for RL than for supervised fine-tuning).
    lora_rank: int = setting(16, "LoRA rank")
    lora_alpha: float = setting(32.0, "LoRA alpha (scale = alpha / rank)")
    lora_dropout: float = setting(0.0, "LoRA dropout")
    lora_targets: list[str] = setting(help="comma-separated module names that get a LoRA", factory=lambda: list(LORA_TARGETS))
    iterations: int = setting(1, "policy updates per round on the same rollouts (>1 makes clipping act)",
                              source="paper: one update per round")
    micro_batch: int | None = setting(None, "completions per forward/backward at most, fewer when the memory "
                                            "budget needs (auto: 8 under 0.5B, 4 under 2B, else 2)",
                                      auto=True, source="measured here: peak memory of a training step")
    grad_clip: float = setting(1.0, "gradient norm clip")
    eps_low: float = setting(0.2, "PPO clip range below 1", source="paper, DAPO")
    eps_high: float = setting(0.28, "PPO clip range above 1", source="DAPO clip-higher")
    weight_decay: float = setting(0.0, "AdamW weight decay")
    # --- training speed (results do not depend on these, except train_dtype within bf16's precision) ---
    train_dtype: str = setting(
        "auto", "frozen base weights for training: auto, bf16 or fp32 (auto: bf16 on CPUs with avx512_bf16/AMX "
                "and CUDA GPUs of compute capability 8+; LoRA weights, optimizer and log-softmax stay fp32)",
        source="measured here (docs/BENCHMARKS.md): bf16 matmuls 1.7-2.5x faster on an avx512_bf16 CPU")
    checkpointing: str = setting(
        "auto", "recompute activations in backward: auto (only when a micro-batch's activations exceed "
                "--train-memory-mb), always or never")
    shared_prefix: bool = setting(
        True, "train each group's prompt once for its L completions (off: every completion re-runs its "
              "prompt, the exact but slower reference path, kept for benchmarks)",
        source="issue 11: same loss and gradients, 5-10x faster steps (docs/BENCHMARKS.md)")
    train_memory_mb: int | None = setting(
        None, "activation memory a training micro-batch may keep before recomputing "
              "(unset: a quarter of the free memory at start, at most 512)",
        source="keeps a training step under 2 GB peak RSS on the bundled model (docs/BENCHMARKS.md)")
    device: str = setting("auto", "where torch trains: auto, cpu, cuda or mps (auto: cuda when torch sees a GPU, "
                                  "else mps on Apple silicon, else cpu)")
    gpu_layers: int | None = setting(
        None, "model layers llama.cpp runs on the GPU (unset: all when llama.cpp was built with GPU offload "
              "and training uses a GPU, CUDA or Apple's, else 0)")
    # --- evaluation ---
    eval_every: int = setting(
        20, "rounds between held-out evaluations (0 = never)",
        source="one evaluation (64 questions, greedy + 2 samples) costs ~2-2.5 make-run rounds since training got "
               "faster: every 20 rounds keeps it near 10 % of a long run (docs/BENCHMARKS.md)")
    eval_per_task: int = setting(16, "held-out questions per task")
    heldout_draw: int = setting(0, "which held-out set (0: every node's; experiments may draw another per seed)")
    # --- swarm ---
    relay: str | None = setting(None, "relay URL, ws://host:port or wss://host:port (unset: train alone); "
                                      "several replicas of one swarm comma-separated, tried in turn")
    relay_ca_file: str | None = setting(
        None, "PEM file of the CA that signed a wss:// relay's certificate, for a relay with a private CA "
              "(unset: the system's trusted CAs)")
    swarm: str = setting("public", "swarm name on the relay")
    token: str | None = setting(None, "shared token of a private swarm")
    relay_ca_sha256: str | None = setting(
        None, "sha256 fingerprint (64 hex) of a self-signed wss:// relay's certificate: trusted when it matches, "
              "instead of a CA (an invite link carries it)")
    manifest_digest: str | None = setting(
        None, "sha256 (64 hex) of the swarm manifest this node agrees to follow (an invite link carries it): a relay "
              "announcing another is refused and the node trains alone")
    manifest_signer: str | None = setting(
        None, "public key (64 hex) of the key the swarm's operator signs manifests with (an invite link carries it): "
              "a manifest that key did not sign is refused and the node trains alone")
    offline: bool = setting(False, "train alone, no relay")
    external_any_task: bool = setting(False, "accept swarm groups of tasks outside this node's own mix "
                                             "(within the size caps of engine.tasks.questions.ANY_TASK_CAPS)")
    # Token-mean loss weighs a group by its tokens: without a cap, a peer's long completions would
    # outweigh the node's own experience. With the paper's I = J = 4 honest groups give about half
    # the tokens; 0.7 leaves room for their spread and bounds a round of maximal-length external
    # groups to ~1.3x a normal one (docs/SECURITY.md).
    external_token_share: float = setting(0.7, "largest share of an update's completion tokens that may come "
                                               "from the swarm; the longest external groups are left out "
                                               "beyond it (1 = no cap)")
    # --- using external groups (engine/sharing/selection.py, engine/learning/offpolicy.py; measured in docs/RESULTS.md) ---
    # Defaults: the best variant measured (docs/RESULTS.md, run 2: 4 agents, 8 rounds, 3 seeds):
    # useful + fill 1.22x alone in total reward (1.16-1.28x per seed), the paper's uniform 1.10x.
    external_selection: str = setting(
        "useful", "which verified swarm groups to train on: uniform (any with reward spread), top (highest "
                   "mean reward first) or useful (success rate strictly between 0 and 1 under this node's "
                   "scoring, nearest 0.5 first, tasks this node fails first); rare: the same groups, the lowest "
                   "success rate first (a probe)",
        source="uniform: the paper; top: GenRL; useful: online difficulty filtering (arXiv 2504.03380)")
    # A wall clock: in an experiment, whose agents take turns, 600 s hold ~3-9 rounds on a 2-core CPU (fewer when
    # the machine is busy), where a real swarm's parallel nodes would hold ~50 (docs/RESULTS.md, chain3-long).
    peer_window_s: float = setting(
        600.0, "draw peers' groups published in the last this many seconds",
        source="SAPO: peers' groups of the current rounds; docs/RESULTS.md, chain3-long (the window a wall clock)")
    fill_dead_slots: bool = setting(
        True, "keep the groups actually trained per round at I + J: own groups without reward spread are "
               "replaced by more swarm groups (alone: by extra own draws, one more batch)",
        source="issue 12: most own groups of the bundled model have no spread")
    external_negatives: str = setting(
        "drop", "swarm answers with negative advantage: drop (weight 0: learn from others' successes only), "
                "onpolicy (trained like own ones), or topr (weight clipped to [0, 1] by the policy ratio, where "
                "the sender's log-probs are known)",
        source="drop: docs/RESULTS.md run 5, 3 seeds (held-out greedy +0.021 [+0.009, +0.034] over alone, "
               "+0.026 over onpolicy); onpolicy: the paper, GenRL; topr: TOPR (arXiv 2503.14286)")
    importance_cap: float = setting(
        0.0, "truncated importance sampling: weigh each trained token by min(trainer prob / sampler prob, C) "
             "where the sampler's log-probs are known (0 = off)",
        source="TRL's vllm_importance_sampling_cap (2-3)")
    share_logprobs: bool = setting(
        False, "attach the sampler's per-token log-probs to shared groups (receivers running the same model "
               "use them for topr and importance_cap)")

    def check_resolved(self) -> None:
        """After resolve_auto no auto setting is left unset; a bug otherwise."""
        missing = [f.name for f in dataclasses.fields(self) if f.metadata.get("auto") and getattr(self, f.name) is None]
        if missing:
            raise RuntimeError(f"settings not resolved: {', '.join(missing)}")


def _fields() -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(NodeConfig)}


def describe(name: str) -> str:
    """The help text of one setting (the GUI's tooltips), with the source of its default."""
    meta = _fields()[name].metadata
    return meta["help"] + (f" (default from: {meta['source']})" if meta["source"] else "")


# --- flags, generated ---------------------------------------------------------------------

def _flag_type(tp: Any) -> tuple[Any, str]:
    """The argparse converter for a field type, and a word for error messages."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):  # X | None -> X
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    base = tp
    if typing.get_origin(base) is list:
        return (lambda text: [t.strip() for t in text.split(",") if t.strip()]), "a comma-separated list"
    word = {int: "a whole number", float: "a number"}.get(base, "text")

    def convert(text: str) -> Any:
        try:
            return base(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {word}, got {text!r}") from None

    return convert, word


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per NodeConfig field (its ``flag`` metadata); the dest is the field name."""
    hints = typing.get_type_hints(NodeConfig)
    for f in dataclasses.fields(NodeConfig):
        flag = f.metadata["flag"]
        if flag is None:
            continue
        flag = flag or "--" + f.name.replace("_", "-")
        help_ = describe(f.name).replace("%", "%%")  # argparse formats help text: a bare % breaks --help
        if hints[f.name] is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_)
        else:
            convert, _ = _flag_type(hints[f.name])
            parser.add_argument(flag, dest=f.name, type=convert, default=None, help=help_)


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags (unset flags are None and leave file values alone)."""
    return {name: getattr(args, name) for name in _fields() if getattr(args, name, None) is not None}


# --- TOML -----------------------------------------------------------------------------------

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
        if isinstance(value, dict) and key not in ("task_weights", "task_config", "task_levels"):
            flat.update({k.replace("-", "_"): v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def to_toml(cfg: NodeConfig) -> str:
    """The settings that differ from the defaults, as a TOML file ``load_toml`` reads back."""
    default = NodeConfig()
    lines: list[str] = []
    tables: list[str] = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if value == getattr(default, f.name) or value is None:
            continue
        if isinstance(value, dict):
            if f.name in ("task_weights", "task_levels"):
                tables.append(f"[{f.name}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in value.items()))
            else:
                for task, conf in value.items():
                    tables.append(f"[task_config.{task}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in conf.items()))
        else:
            lines.append(f"{f.name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n" + ("\n" + "\n".join(tables) if tables else "")


def _toml_value(value: Any) -> str:
    # JSON's scalars and arrays of them are valid TOML (strings: TOML basic strings share JSON's escapes).
    return msgspec.json.encode(value).decode()


# --- building and checking ------------------------------------------------------------------

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

    need(cfg.weights in WEIGHT_CHOICES,
         f"weights must be {', '.join(WEIGHT_CHOICES[:-1])} or {WEIGHT_CHOICES[-1]}, got {cfg.weights!r}")
    need(cfg.prompts in ("new", "old", "worked", "worked-nosys"),
         f"prompts must be new, old, worked or worked-nosys, got {cfg.prompts!r}")
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
    need(cfg.threads is None or 1 <= cfg.threads <= 1024, f"threads must be 1..1024, got {cfg.threads}")
    need(1 <= cfg.cpu_limit <= 100, f"cpu_limit must be 1..100 (percent), got {cfg.cpu_limit}")
    need(0 <= cfg.max_other_cpu <= 100, f"max_other_cpu must be 0..100 (percent; 0 = never), got {cfg.max_other_cpu}")
    need(cfg.priority in PRIORITIES, f"priority must be one of {', '.join(PRIORITIES)}, got {cfg.priority!r}")
    if cfg.schedule is not None:
        try:
            parse_schedule(cfg.schedule)
        except ValueError as exc:
            raise SapoError(str(exc)) from None
    need(cfg.seed >= 0, f"seed must be >= 0, got {cfg.seed}")
    need(cfg.fewshot is None or 0 <= cfg.fewshot <= 8, f"fewshot must be 0..8, got {cfg.fewshot}")
    # Cross-field, with the swarm: peers reject groups whose claimed bonus is above the protocol's maximum,
    # so a larger bonus would get every group this node shares refused.
    need(cfg.format_bonus is None or 0 <= cfg.format_bonus <= MAX_FORMAT_BONUS,
         f"format bonus must be 0..{MAX_FORMAT_BONUS} (peers refuse groups with more), got {cfg.format_bonus}")
    need(cfg.optimizer in ("adamw", "adam", "sgd"), f"optimizer must be adamw, adam or sgd, got {cfg.optimizer!r}")
    # Above 1 a LoRA update is no longer a step but a jump: its weights overflow within a few rounds.
    need(cfg.learning_rate is None or 0 < cfg.learning_rate <= 1,
         f"learning rate must be > 0 and at most 1, got {cfg.learning_rate}")
    need(cfg.learning_rate_alone is None or 0 < cfg.learning_rate_alone <= 1,
         f"learning_rate_alone must be > 0 and at most 1, got {cfg.learning_rate_alone}")
    need(cfg.lora_rank >= 1, f"LoRA rank must be >= 1, got {cfg.lora_rank}")
    need(cfg.lora_alpha > 0, f"LoRA alpha must be > 0, got {cfg.lora_alpha}")
    need(0 <= cfg.lora_dropout < 1, f"LoRA dropout must be in [0, 1), got {cfg.lora_dropout}")
    need(len(cfg.lora_targets) > 0, "LoRA targets must name at least one module")
    need(cfg.iterations >= 1, f"iterations must be >= 1, got {cfg.iterations}")
    need(cfg.micro_batch is None or cfg.micro_batch >= 1, f"micro batch must be >= 1, got {cfg.micro_batch}")
    need(cfg.train_dtype in ("auto", "bf16", "fp32"), f"train dtype must be auto, bf16 or fp32, got {cfg.train_dtype!r}")
    need(cfg.checkpointing in ("auto", "always", "never"),
         f"checkpointing must be auto, always or never, got {cfg.checkpointing!r}")
    need(cfg.train_memory_mb is None or cfg.train_memory_mb >= 1,
         f"train memory must be >= 1 MB, got {cfg.train_memory_mb}")
    need(cfg.device in ("auto", "cpu", "cuda", "mps"), f"device must be auto, cpu, cuda or mps, got {cfg.device!r}")
    need(cfg.gpu_layers is None or cfg.gpu_layers >= 0, f"gpu layers must be >= 0, got {cfg.gpu_layers}")
    need(cfg.grad_clip > 0, f"grad clip must be > 0, got {cfg.grad_clip}")
    need(0 <= cfg.eps_low < 1 and cfg.eps_high >= 0, "clip ranges must satisfy 0 <= eps_low < 1 and eps_high >= 0")
    bad_level = next((f"{t} = {v}" for t, v in cfg.task_levels.items() if v < 0), None)
    need(bad_level is None, f"task levels must be >= 0, got {bad_level}")
    need(cfg.eval_every >= 0, f"eval every must be >= 0, got {cfg.eval_every}")
    need(cfg.eval_per_task >= 1, f"eval questions per task must be >= 1, got {cfg.eval_per_task}")
    need(cfg.heldout_draw >= 0, f"held-out draw must be >= 0, got {cfg.heldout_draw}")
    need(0 < cfg.peer_window_s <= MAX_AGE_S, f"peer window must be in (0, {MAX_AGE_S:.0f}] seconds, got {cfg.peer_window_s}")
    need(0 < cfg.external_token_share <= 1, f"external token share must be in (0, 1], got {cfg.external_token_share}")
    need(swarm_name_problem(cfg.swarm) is None, swarm_name_problem(cfg.swarm) or "")
    for name, what in (("relay_ca_sha256", "a sha256"), ("manifest_digest", "a sha256"),
                       ("manifest_signer", "an Ed25519 public key")):
        value = getattr(cfg, name)
        need(value is None or re.fullmatch(r"[0-9a-f]{64}", value) is not None,
             f"{name.replace('_', ' ')} must be 64 lowercase hex digits ({what}), got {str(value)[:80]!r}")
    need(cfg.external_selection in EXTERNAL_SELECTIONS,
         f"external selection must be uniform, top, useful or rare, got {cfg.external_selection!r}")
    need(cfg.external_negatives in ("onpolicy", "drop", "topr"),
         f"external negatives must be onpolicy, drop or topr, got {cfg.external_negatives!r}")
    need(cfg.importance_cap == 0 or cfg.importance_cap >= 1,
         f"importance cap must be 0 (off) or >= 1, got {cfg.importance_cap}")
    # Last, so that a field's own rule speaks first: inf passes most range checks (> 0, >= 1) and means nothing here.
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        values = value.values() if isinstance(value, dict) else [value]
        bad = next((v for v in values if isinstance(v, float) and not math.isfinite(v)), None)
        need(bad is None, f"{f.name} must be a finite number, got {bad}")


ALONE_LEARNING_RATE = 1e-4
SWARM_LEARNING_RATE = 2e-4


def learning_rate_for(on_peers: bool) -> float:
    """The learning rate a node trains at unless set: larger when its updates carry peers' groups."""
    return SWARM_LEARNING_RATE if on_peers else ALONE_LEARNING_RATE


# The way of using peers' groups the swarm's rate was measured with (run 7). The paper's uniform sharing at that
# rate (run 8: uniform selection, no refill, peers' negatives trained) ended 0.12 below itself at 1e-4 on new
# questions, with gradient norms at the clip, so any other way keeps alone's rate.
SWARM_RATE_METHOD = {"external_selection": "useful", "fill_dead_slots": True, "external_negatives": "drop"}


def swarm_rate_fits(settings: Any) -> bool:
    """Whether these settings (a NodeConfig or a dict of its fields) use peers' groups as the swarm's rate was
    measured with."""
    get = settings.get if isinstance(settings, dict) else functools.partial(getattr, settings)
    return all(get(k) == v for k, v in SWARM_RATE_METHOD.items())


def trains_on_peers(cfg: NodeConfig) -> bool:
    """Whether this node's updates carry peers' groups: a relay, not offline, and J > 0."""
    return bool(cfg.relay) and not cfg.offline and cfg.external_groups > 0


def resolve_auto(cfg: NodeConfig, n_params: int, threads: int = 1) -> NodeConfig:
    """Fill every auto (None) setting from the model's size and this machine; none is left."""
    tiny = n_params < TINY_PARAMS
    out = dataclasses.replace(
        cfg,
        preset=cfg.preset or ("easy" if tiny else "paper"),
        fewshot=cfg.fewshot if cfg.fewshot is not None else (2 if tiny else 0),
        format_bonus=cfg.format_bonus if cfg.format_bonus is not None else (0.1 if tiny else 0.0),
        completions=cfg.completions or (4 if tiny else 8),
        max_tokens=cfg.max_tokens or (96 if tiny else 256),
        micro_batch=cfg.micro_batch or (8 if tiny else 4 if n_params < 2_000_000_000 else 2),
        threads=cfg.threads or threads,
        learning_rate=cfg.learning_rate or learning_rate_for(trains_on_peers(cfg) and swarm_rate_fits(cfg)),
        learning_rate_alone=cfg.learning_rate_alone or cfg.learning_rate or ALONE_LEARNING_RATE,
    )
    out.check_resolved()
    return out
