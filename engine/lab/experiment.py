"""``sapo-engine experiment``: N agents on one machine, through the real protocol, per configuration and seed.

Each agent is a full node (engine/run/node.py): its own Ed25519 identity, question and sampling
streams, LoRA, optimizer and checkpoints, talking to a real relay on 127.0.0.1 (a child process,
engine/lab/relay_child.py). What the agents share is only the memory of the base model: one
llama.cpp model whose LoRA slot is swapped to the agent about to act, and one torch model whose
LoRA weights are swapped likewise (``Backbone``), so 8 agents of the bundled model fit in a few GB.

Agents take turns within a round (agent 0, 1, ..., N-1), so agent k samples its peers' groups of
this round (those before it) and of the last (those after it). A configuration is a name: a base,
``alone`` (I + J own groups, no relay) or ``swarm`` (I own + J external, the paper's uniform
choice), plus modifiers joined with ``+``: ``top``, ``useful``, ``rare`` (``external_selection``), ``fill``
(``fill_dead_slots``), ``drop``, ``topr`` (``external_negatives``), ``isC`` (``importance_cap`` C),
``frontier`` (task levels follow each agent's success rate, engine/tasks/frontier.py). Each trains at the
learning rate its node ships with: 2e-4 where it trains on peers' groups the default way (``useful``, ``fill``
and ``drop``), else 1e-4 (``--lr`` sets one for all).

Configurations are paired within a seed: agent k has the same identity, LoRA initialisation and
held-out set in every configuration, and draws the same first I own questions of every round in
the same order (alone's other J, and any refill, come from a second question stream:
``QuestionStream`` lanes), so a difference between configurations is the sharing, not the draw.
The relay's draws are seeded too, per cell (``relay --seed``; relay/pool.py), so a cell run again
repeats every round, the swarm's as alone's, on the same machine type (before this, which peers'
groups an agent got varied from run to run: one seed's swarm read 1.43x and 1.29x alone's reward).
One clock remains: a receiver samples groups pooled in the last 600 s (``SwarmClient.sample``), about
8 rounds of 8 agents here, so a much slower or busier machine can draw differently late in a long cell.
Each agent is evaluated on the held-out set at the start (once per seed and agent: every
configuration starts from the same weights), after the middle round and at the end. Every node's
held-out set is the same 128 questions; ``--heldout-per-seed`` gives seed s a set of its own
(``heldout_draw`` s + 1), so that conclusions over seeds rest on more questions than one set's.

Layout of ``--out DIR``::

    relay/worker-<w>/                  # each worker's relay: its log and stats (a second run's workers take the next free)
    <config>/seed-<s>/meta.json        # what ran: agents, rounds, settings
    <config>/seed-<s>/records.jsonl    # one line per agent per round (and the final held-out eval)
    <config>/seed-<s>/agent-<k>/       # the agent's data dir: identity, checkpoints, adapters
    <config>/seed-<s>/evals/agent-<k>-round-<n>.json  # held-out results after round n (the middle one)
    <config>/seed-<s>/done.json        # written last: the cell is complete, with start, middle and end evals
    start/seed-<s>/agent-<k>.json      # held-out results before any training, shared by all configurations

Cells (a configuration and a seed) are independent, so ``--workers K`` runs K of them at a time,
each in its own process with its own backbone and relay (by default one per physical core, each
agent on one thread: on a small machine that is more agent-rounds per hour than one process on
every core, docs/BENCHMARKS.md). Workers take cells as they come free, seed-major, each cell under
a lock held while it runs (``claim``): a worker never idles while a cell is left, a resumed run's
finished cells cost nothing, and two experiments started on the same ``--out`` never run one cell
twice (each runs what the other does not hold). A seed's start evaluation is made once, under a lock.

A killed run resumes where it stopped when started again with the same ``--out``: every agent
resumes from its checkpoint (written each round) and cells with ``done.json`` are skipped. Records and
held-out results from after an agent's checkpoint belong to rounds that will be rerun: they are moved to
``<cell>/superseded/``, never mixed with the rerun's. That is what happens on another machine, where the
committed records arrive without the (uncommitted, ~60 MB per agent) checkpoints: an unfinished cell is
rerun from round 0, a finished one is kept as it is. The relay's pool does not survive (agents first after a
resume see fewer external groups for a round; the budget is kept with own groups).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import math
import multiprocessing
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from engine.config import NodeConfig, build_config, flag_settings, load_toml
from engine.errors import SapoError
from engine.locks import try_lock
from engine.paths import default_threads, path_arg
from engine.run.priority import apply_priority

# Held-out questions per agent unless --eval-per-task says otherwise: at least 128 (a standard error of ~0.04 per
# agent), spread evenly over the mix's tasks (3 easy tasks x 43; 4 x 32 before leap years left the preset).
EVAL_QUESTIONS = 128
QUICK = {"agents": 2, "rounds": 5, "configs": "alone,swarm+useful+fill+drop", "seeds": "0",
         "settings": {"local_groups": 2, "external_groups": 2, "completions": 4, "max_tokens": 48,
                      "eval_per_task": 4}}
DEFAULT_CONFIGS = "alone,swarm,swarm+useful+fill+drop"  # alone, the paper's way, the node's default
# A base name means the paper's way whatever the node's defaults are; modifiers change it.
PAPER: dict[str, Any] = {"external_selection": "uniform", "fill_dead_slots": False,
                         "external_negatives": "onpolicy", "importance_cap": 0.0, "share_logprobs": False, "frontier": False}
MODIFIERS: dict[str, dict[str, Any]] = {
    "top": {"external_selection": "top"},
    "useful": {"external_selection": "useful"},
    "rare": {"external_selection": "rare"},
    "fill": {"fill_dead_slots": True},
    "drop": {"external_negatives": "drop"},
    "topr": {"external_negatives": "topr", "share_logprobs": True},
    "frontier": {"frontier": True},
}


def eval_per_task(cfg: NodeConfig) -> int:
    """Held-out questions per task so that an agent answers at least EVAL_QUESTIONS in all."""
    from engine.tasks.questions import build_mix

    return math.ceil(EVAL_QUESTIONS / len(build_mix(cfg.preset, cfg.tasks, cfg.task_weights, cfg.task_config)))


def config_overrides(name: str, local: int, external: int) -> dict[str, Any]:
    """The NodeConfig settings a configuration name stands for (see the module docstring)."""
    # Alone keeps I and J as set: without a relay a node makes the J groups itself (from its second
    # question stream), so its first I questions per round are the swarm configurations' I.
    base, *mods = name.split("+")
    if base not in ("alone", "swarm"):
        raise SapoError(f"configuration {name!r} must start with 'alone' or 'swarm'")
    out: dict[str, Any] = {"local_groups": local, "external_groups": external, **PAPER}
    for mod in mods:
        if mod in MODIFIERS:
            out.update(MODIFIERS[mod])
        elif re.fullmatch(r"is\d+(\.\d+)?", mod):
            out["importance_cap"] = float(mod[2:])
            out["share_logprobs"] = True
        else:
            raise SapoError(f"unknown modifier {mod!r} in configuration {name!r}: "
                            f"use {', '.join(MODIFIERS)} or isC (e.g. is2)")
    return out


def cell_learning_rate(name: str, plan: Plan, external: int) -> float:
    """``--lr`` for every cell when given; else the rate a node of this configuration ships with
    (engine/config.py ``learning_rate_for``): the agents run offline with the relay injected, so the
    node's own rule, which looks at its relay setting, would give every one of them alone's."""
    from engine.config import learning_rate_for, swarm_rate_fits

    on_peers = shares(name) and external > 0 and swarm_rate_fits(config_overrides(name, 1, external))
    return plan.settings.get("learning_rate") or learning_rate_for(on_peers)


def shares(name: str) -> bool:
    """Whether a configuration's agents talk to the relay."""
    return name.split("+")[0] == "swarm"


def check_out_dir(out: Path) -> None:
    """``--out`` is a directory this process can write, made if missing: one line now, not two workers' tracebacks."""
    if out.exists() and not out.is_dir():
        raise SapoError(f"--out {out} is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SapoError(f"--out {out} cannot be made: {exc.strerror or exc}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise SapoError(f"--out {out} is not writable")


MAX_AGENTS = 255


def agent_identity(k: int) -> Any:
    """Agent k's identity: the same in every configuration and seed, so its question stream differs only by seed."""
    from wire.identity import Identity

    return Identity.from_seed(bytes([k + 1]) * 32)


# --- records ----------------------------------------------------------------------------

def read_records(path: Path) -> list[dict[str, Any]]:
    """Complete JSON objects, one a line, of a records file; a torn last line (a kill mid-write) is left out."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):  # a line of other JSON (a list, a number) is no record either
            out.append(record)
    return out


def append_record(path: Path, record: dict[str, Any]) -> None:
    """One line added to a records file, opened for it: a file replaced under a running experiment (a git
    checkout or stash, a sync tool) gets the next line, where a handle held open would write to the old one."""
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")


def keep_records(records: list[dict[str, Any]], rounds_done: dict[int, int]) -> list[dict[str, Any]]:
    """Round records up to each agent's checkpointed round (later ones are rerun on resume), each once."""
    seen: set[tuple[int, int]] = set()
    out = []
    for r in records:
        key = (r["agent"], r["round"])
        if r.get("type") == "round" and r["round"] <= rounds_done.get(r["agent"], 0) and key not in seen:
            seen.add(key)
            out.append(r)
    return out


ROUND_KEYS = ("round", "reward_mean", "accuracy", "format_rate", "task_score", "groups", "groups_trained",
              "groups_dropped", "external_groups", "external_candidates", "dead_slots_filled", "external_reward_mean",
              "rejected_groups", "rejected_reasons", "groups_shared", "tokens_trained", "gen_tokens", "gen_s", "score_s", "train_s",
              "round_s", "loss", "per_task", "own_questions", "swap_ms", "checkpoint_ms", "gen_prompt_tokens",
              "gen_prompt_tokens_computed", "train_prompt_tokens", "train_prompt_tokens_computed", "train_completion_tokens",
              "train_completion_tokens_computed", "task_levels", "level_changes", "paired_reward_mean", "group_summaries",
              "grad_norm", "clip_low_frac", "clip_high_frac", "learning_rate")


def superseded(records: list[dict[str, Any]], evals: list[Path],
               rounds_done: dict[int, int]) -> tuple[list[dict[str, Any]], list[Path]]:
    """Round records and held-out results (``agent-<k>-round-<n>.json``) from after each agent's checkpointed
    round: left by a run whose later checkpoints are gone (another machine, a data dir deleted)."""
    late = [r for r in records if r.get("type") == "round" and r["round"] > rounds_done.get(r["agent"], 0)]
    stale = []
    for path in evals:
        m = re.fullmatch(r"agent-(\d+)-round-(\d+)\.json", path.name)
        if m and int(m[2]) > rounds_done.get(int(m[1]), 0):
            stale.append(path)
    return late, sorted(stale)


def round_record(config: str, seed: int, agent: int, metrics: dict[str, Any], model: str = "") -> dict[str, Any]:
    return {"type": "round", "config": config, "seed": seed, "agent": agent, "model": model,
            **{k: metrics[k] for k in ROUND_KEYS if k in metrics}}


# --- agents on one backbone -------------------------------------------------------------

class Agent:
    """A node and its LoRA weights while another agent holds the backbone."""

    def __init__(self, index: int, node: Any, model: str = "") -> None:
        self.index = index
        self.node = node
        self.model = model
        self.lora = {n: p.detach().clone() for n, p in node.policy.named_parameters() if p.requires_grad}

    def activate(self) -> None:
        import torch

        with torch.no_grad():
            for n, p in self.node.policy.named_parameters():
                if p.requires_grad:
                    p.copy_(self.lora[n])
        self.node.llm.swap_adapter(self.node.sync.current)  # None before its first update: the bare base

    def deactivate(self) -> None:
        import torch

        with torch.no_grad():
            for n, p in self.node.policy.named_parameters():
                if p.requires_grad:
                    self.lora[n].copy_(p)


# --- the runner ---------------------------------------------------------------------------

@dataclass
class Plan:
    out: Path
    configs: list[str]
    seeds: list[int]
    agents: int
    rounds: int
    settings: dict[str, Any]  # NodeConfig settings common to every configuration
    models: list[str] | None = None  # agent k runs models[k % len(models)]; None: the settings' model
    worker: int = 0  # which of the parallel workers runs it (each has its own relay)
    heldout_per_seed: bool = False  # seed s evaluates on held-out set s + 1 (``heldout_draw``), not every node's

    def all_cells(self) -> list[tuple[str, int]]:
        # Seed-major: a run stopped part-way has every configuration for the seeds it finished, so it compares.
        return [(c, s) for s in self.seeds for c in self.configs]


def distinct_models(models: list[str | None]) -> tuple[list[str | None], list[int]]:
    """Pure: each model once, in order of first mention, and for each entry of ``models`` the index of its own."""
    names = list(dict.fromkeys(models))
    return names, [names.index(m) for m in models]


def cell_dir(plan: Plan, config: str, seed: int) -> Path:
    return plan.out / _safe(config) / f"seed-{seed}"


@contextlib.contextmanager
def claim(cell: Path) -> Iterator[bool]:
    """Hold ``cell`` for the block: True when this process got it, False when another worker or run holds it.

    An exclusive lock on ``<cell>/running.lock`` (flock; msvcrt's byte lock on Windows), which the OS drops
    when its holder exits, however it exits: a killed run never leaves a cell claimed.
    """
    cell.mkdir(parents=True, exist_ok=True)
    fh = try_lock(cell / "running.lock")
    if fh is None:
        yield False
        return
    with fh:
        yield True  # released by closing the file


@contextlib.contextmanager
def relay_folder(root: Path, first: int) -> Iterator[Path]:
    """A relay folder held for the block, ``worker-<first>`` or the next one no other process holds.

    Two experiments on the same ``--out`` share its cells (``claim``); without this their workers of the same
    index would share one relay folder, and the second relay, truncating the log, would hide the port the
    first one's is read from.
    """
    w = first
    while True:
        folder = root / f"worker-{w}"
        folder.mkdir(parents=True, exist_ok=True)
        fh = try_lock(folder / "running.lock")
        if fh is not None:
            with fh:
                yield folder
            return
        w += 1


def workers_for(plan: Plan, workers: int) -> list[Plan]:
    """``workers`` copies of the plan, one per worker (never more than its cells); each takes cells as they come."""
    n = max(1, min(workers, len(plan.all_cells())))
    return [dataclasses.replace(plan, worker=w) for w in range(n)]


def agent_rounds_left(plan: Plan) -> int:
    """The plan's agent-rounds in cells not finished yet (a resumed cell's done rounds are taken off as it resumes)."""
    return sum(plan.agents * plan.rounds for c, s in plan.all_cells() if not _finished(cell_dir(plan, c, s), plan.rounds))


def default_workers(cells: int, threads: int | None) -> int:
    """One worker per physical core's worth of threads, at most one per cell, and ~3 GB of free memory each."""
    import psutil

    by_cpu = default_threads() // (threads or 1)
    by_memory = int(psutil.virtual_memory().available // (3 << 30))
    return max(1, min(cells, by_cpu, by_memory))


def prepare_models(plan: Plan) -> None:
    """Every model checked and its working copy made once, here, before any worker starts: a missing
    model is one error before any work, and workers never convert the same file at the same time."""
    from engine.models.prepare import prepare_model

    common = build_config({}, plan.settings)
    for m in distinct_models(plan.models or [None])[0]:
        prepare_model(dataclasses.replace(common, model=m) if m else common, fallback="smollm2-135m")


def check_questions(plan: Plan) -> None:
    """Each seed's held-out set leaves its tasks room to train (``questions.check_training_room``): a task
    space too small for them is one error before any work, not a worker stopping when its questions run out."""
    from engine.tasks.questions import build_mix, check_training_room, heldout_set

    cfg = build_config({}, plan.settings)
    if cfg.preset not in ("easy", "paper"):  # chosen per model: each node checks its own mix at its start
        return
    mix = build_mix(cfg.preset, cfg.tasks, cfg.task_weights, cfg.task_config)
    for draw in sorted({s + 1 if plan.heldout_per_seed else cfg.heldout_draw for s in plan.seeds}):
        check_training_room(mix, heldout_set(mix, cfg.eval_per_task, draw), cfg.eval_per_task)


def run_workers(plans: list[Plan], stream: Any = sys.stderr) -> None:
    """Each plan in its own process (spawned: a fresh interpreter, its own torch and llama.cpp)."""
    if len(plans) == 1:
        run_plan(plans[0], stream)
        return
    ctx = multiprocessing.get_context("spawn")
    shared = Progress.start(agent_rounds_left(plans[0]), ctx)  # one count and ETA for the whole run
    procs = [ctx.Process(target=_worker, args=(p, w, os.getpid(), shared), name=f"experiment-worker-{w}")
             for w, p in enumerate(plans)]
    for proc in procs:
        proc.start()
    try:
        for proc in procs:
            proc.join()
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(10)
    failed = [p.name for p in procs if p.exitcode != 0]
    if failed:
        raise SapoError(f"{', '.join(failed)} stopped with an error (see above); run again with the same --out "
                        f"to resume")


def _worker(plan: Plan, index: int, parent: int, shared: Progress) -> None:
    if sys.platform == "linux":  # a killed experiment leaves no worker behind (nor, through it, a relay)
        import ctypes

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before that took effect
        raise SystemExit(1)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        run_plan(plan, Prefixed(sys.stderr, f"[worker {index}] "), shared)
    except SapoError as e:
        print(f"[worker {index}] error: {e}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


class Prefixed:
    """A text stream that starts each line with a worker's name. ``print`` writes a line's text and its newline
    in two calls, so where a line starts is remembered between writes."""

    def __init__(self, stream: Any, prefix: str) -> None:
        self.stream, self.prefix, self.at_line_start = stream, prefix, True

    def write(self, text: str) -> int:
        out = []
        for line in text.splitlines(keepends=True):
            out.append(self.prefix + line if self.at_line_start else line)
            self.at_line_start = line.endswith("\n")
        return self.stream.write("".join(out))

    def flush(self) -> None:
        self.stream.flush()


@dataclass
class Progress:
    """The run's agent-rounds: left to run when it began (less those a resumed cell finds done) and done since,
    shared by its workers (multiprocessing Values), so every worker's line counts and times the whole run."""

    total: Any
    done: Any
    t0: float  # time.time() at the run's start: the same clock in every worker

    @classmethod
    def start(cls, total: int, ctx: Any = multiprocessing) -> Progress:
        """Counters from ``ctx`` (a multiprocessing context, so spawned workers can be handed them)."""
        return cls(ctx.Value("q", total), ctx.Value("q", 0), time.time())


PACE_WINDOW = 40  # agent-rounds a worker's pace is read over: ~5 rounds of 8 agents, so a start evaluation fades out


class EtaPrinter:
    """One line per agent-round: where the run is, and an ETA from the run's recent pace (all workers').

    The pace is that of the last ``PACE_WINDOW`` agent-rounds this worker saw counted, not of the run since its
    start: the start evaluations, model loads and a machine's load that came and went would otherwise hold the
    ETA far off for hours (a run whose start evaluation ran beside a CI run read 96 h for 640 agent-rounds
    of ~10 s)."""

    def __init__(self, progress: Progress, stream: Any = sys.stderr, clock: Callable[[], float] = time.time) -> None:
        self.progress, self.stream, self.clock = progress, stream, clock
        self.seen: collections.deque[tuple[float, int]] = collections.deque(maxlen=PACE_WINDOW)

    def skip(self, n: int) -> None:
        with self.progress.total.get_lock():
            self.progress.total.value -= n

    def tick(self, text: str) -> None:
        p = self.progress
        with p.done.get_lock():
            p.done.value += 1
            done, total = p.done.value, p.total.value
        now = self.clock()
        elapsed = max(now - p.t0, 1e-9)
        self.seen.append((now, done))
        then, done_then = self.seen[0]
        per_round = (now - then) / (done - done_then) if done > done_then else elapsed / done
        left = (total - done) * per_round
        print(f"[{done}/{total} agent-rounds, {_hms(elapsed)} elapsed, ETA {_hms(left)}] {text}",
              file=self.stream, flush=True)


def _hms(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def run_plan(plan: Plan, stream: Any = sys.stderr, shared: Progress | None = None) -> None:
    from engine.lab.relay_child import RelayChild
    from engine.models.hardware import tune_allocator
    from engine.models.prepare import prepare_model
    from engine.run.backbone import Backbone

    plan.out.mkdir(parents=True, exist_ok=True)
    tune_allocator()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar per model load and worker drowns the one line per agent-round
    common = build_config({}, plan.settings)
    local, external = common.local_groups, common.external_groups
    cells = [(c, s, config_overrides(c, local, external) | {"learning_rate": cell_learning_rate(c, plan, external)})
             for c, s in plan.all_cells()]
    # One backbone per distinct model, built as a single node's is; each agent's LoRA is swapped in (Agent).
    # A model named twice (--models a,a,a,b: one b among three a's) shares its backbone.
    names, slot = distinct_models(plan.models or [None])
    loaded = [prepare_model(dataclasses.replace(common, model=m) if m else common, fallback="smollm2-135m")
              for m in names]
    distinct = [Backbone.load(m, m.cfg, m.cfg.threads or 1) for m in loaded]
    models, backbones = [loaded[i] for i in slot], [distinct[i] for i in slot]
    ran_on = machine(backbones[0], [m.path for m in models])  # once: the same for every cell of this worker
    progress = EtaPrinter(shared or Progress.start(agent_rounds_left(plan)), stream)
    try:
        with relay_folder(plan.out / "relay", plan.worker) as folder:
            relay = RelayChild(folder)
            try:
                for config, seed, overrides in cells:
                    cell = cell_dir(plan, config, seed)
                    with claim(cell) as mine:
                        if mine and not _finished(cell, plan.rounds):  # finished: counted out of the total at the start
                            _run_claimed(plan, cell, config, seed, overrides, models, backbones, relay, ran_on,
                                         progress)
            finally:
                relay.close()
    finally:
        for b in distinct:
            b.close()


def _run_claimed(plan: Plan, cell: Path, config: str, seed: int, overrides: dict[str, Any], models: list[Any],
                 backbones: list[Any], relay: Any, ran_on: dict[str, Any], progress: EtaPrinter) -> None:
    """One cell, held by this worker (``claim``): its agents built on this worker's backbones and relay, then run."""
    from engine.run.event_log import EventLog
    from engine.run.node import Node
    from engine.sharing.keyfile import KEY_FILE, install
    from engine.sharing.swarm_client import SwarmClient

    (cell / "done.json").unlink(missing_ok=True)  # more rounds asked for than it ran: extend it
    agents = []
    for k in range(plan.agents):
        model, backbone = models[k % len(models)], backbones[k % len(models)]
        per_seed = {"heldout_draw": seed + 1} if plan.heldout_per_seed else {}
        cfg = dataclasses.replace(model.cfg, **overrides, **per_seed, seed=seed, eval_every=0, relay=None,
                                  offline=True)
        if k == 0:
            _write_meta(cell, config, seed, plan, cfg, [m.name for m in models], ran_on)
        data = cell / f"agent-{k}"
        if not (data / KEY_FILE).exists():
            data.mkdir(parents=True, exist_ok=True)
            install(data, agent_identity(k))
        identity = agent_identity(k)
        swarm = None
        if shares(config) and cfg.external_groups > 0:
            swarm = SwarmClient(relay.url, f"{_safe(config)}-s{seed}", identity, model.name, None,
                                on_status=lambda _m: None)
        node = Node(cfg, model, identity.node_id, EventLog(), data, swarm, backbone=backbone)
        agents.append(Agent(k, node, model.name))
    _run_cell(cell, config, seed, agents, plan.rounds, progress, plan.out / "start" / f"seed-{seed}")
    for a in agents:
        a.node.close()


def _safe(config: str) -> str:
    return config.replace("+", "_")


def _finished(cell: Path, rounds: int) -> bool:
    done = cell / "done.json"
    return done.exists() and json.loads(done.read_text()).get("rounds", 0) >= rounds


def machine(backbone: Any, working: list[Path]) -> dict[str, Any]:
    """What a cell ran on, for its table: the CPU, the dtype training used (bf16 or fp32 changes the numbers a
    little, docs/RESULTS.md run 6), the working copies sampled from (``weights = "auto"`` picks BF16 or Q8_0 by
    CPU) and the code's commit when it runs from a git checkout."""
    import subprocess

    from engine.models.hardware import detect

    hw = detect(use_torch=False)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, text=True,
                                capture_output=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {"cpu": hw.cpu_name, "cores": hw.cpu_logical, "device": str(backbone.device),
            "train_dtype": str(backbone.train_dtype).removeprefix("torch."), "working": [p.name for p in working],
            "commit": commit}


def _write_meta(cell: Path, config: str, seed: int, plan: Plan, cfg: NodeConfig, models: list[str],
                ran_on: dict[str, Any] | None = None) -> None:
    cell.mkdir(parents=True, exist_ok=True)
    meta = {"config": config, "seed": seed, "agents": plan.agents, "rounds": plan.rounds, "models": models,
            "settings": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "token"}, "machines": []}
    old = cell / "meta.json"
    prev: dict[str, Any] = {}
    if old.exists():
        prev = json.loads(old.read_text())
        speed_only = ("threads", "device", "gpu_layers", "train_memory_mb", "checkpointing", "shared_prefix")
        # A setting added to the code since the run began is not a difference (it ran at its default).
        before = {k: v for k, v in prev.get("settings", {}).items() if k not in speed_only}
        same = all(meta["settings"].get(k) == v for k, v in before.items())
        if prev.get("agents") != plan.agents or prev.get("models", models) != models or not same:
            raise SapoError(f"{cell} holds a run with other settings or agent count; use another --out")
    # Every machine a cell ran on, once each in order: a resume on another machine is visible in its table.
    meta["machines"] = prev.get("machines", [])
    if ran_on is not None and ran_on not in meta["machines"]:
        meta["machines"].append(ran_on)
    tmp = cell / "meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, old)


EVAL_KEYS = ("eval_accuracy", "eval_sampled_reward", "eval_sampled_accuracy", "eval_questions", "eval_s", "per_task",
             "per_question")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def _held_out(a: Agent, path: Path, what: str, stream: Any, wait: bool = True) -> dict[str, Any] | None:
    """Agent a's held-out results, kept in ``path``: measured once, read back on a resume. Locked,
    because the cells of one seed, in parallel workers, share their start evaluations; ``wait`` False:
    None at once while another worker measures it (so this one measures another agent meanwhile)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        if sys.platform != "win32":  # on Windows two workers may both measure it: the same result, twice the time
            import fcntl

            try:
                fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                return None
        if path.exists():
            kept = json.loads(path.read_text())
            # A start evaluation is shared by every configuration of the seed: one made on another held-out set
            # (another --eval-per-task, task mix or held-out draw) would pair an end with the wrong start, silently.
            if kept.get("eval_questions") != len(a.node.heldout):
                raise SapoError(f"{path} was measured on {kept.get('eval_questions')} held-out questions, this run "
                                f"asks {len(a.node.heldout)}; use another --out")
            from engine.tasks.questions import question_key

            if "per_question" in kept and [q for q, _, _ in kept["per_question"]] != [question_key(q) for q in a.node.heldout]:
                raise SapoError(f"{path} was measured on other held-out questions than this run's; use another --out")
            return kept
        return _evaluate(a, path, what, stream)


def _evaluate(a: Agent, path: Path, what: str, stream: Any) -> dict[str, Any]:
    a.activate()
    try:
        e = a.node.evaluate()
    finally:
        a.deactivate()
    out = {k: e[k] for k in EVAL_KEYS} | {"round": a.node.round, "model": a.model}
    _write_json(path, out)
    print(f"agent {a.index} held-out {what}: greedy {e['eval_accuracy']:.3f}, "
          f"sampled {e['eval_sampled_accuracy']:.3f}", file=stream, flush=True)
    return out


def middle_round(rounds: int) -> int | None:
    """The round after which the middle evaluation runs (none for runs too short to have a middle)."""
    return rounds // 2 if rounds >= 4 else None


def _run_cell(cell: Path, config: str, seed: int, agents: list[Agent], rounds: int, progress: EtaPrinter,
              start_dir: Path) -> None:
    path = cell / "records.jsonl"
    done = {a.index: a.node.round for a in agents}
    records = read_records(path)
    late, stale = superseded(records, sorted((cell / "evals").glob("agent-*-round-*.json")), done)
    if late or stale:
        # Rounds these agents will run again: their old results must not pair with (or stand in for) the rerun's.
        away = cell / "superseded"
        (away / "evals").mkdir(parents=True, exist_ok=True)
        with open(away / "records.jsonl", "a") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in late)
        for e in stale:
            os.replace(e, away / "evals" / e.name)
        lo, hi = min(done.values()), max(done.values())
        print(f"{config} seed {seed}: {len(late)} round records and {len(stale)} held-out results are from after "
              f"the agents' checkpoints (round {lo if lo == hi else f'{lo}-{hi}'}; another machine?): moved to "
              f"{away}; those rounds run again", file=progress.stream, flush=True)
    kept = keep_records(records, done)
    have = {(r["agent"], r["round"]) for r in kept}
    for a in agents:  # killed between a checkpoint and its record: the round's summary is in the checkpoint
        for h in a.node.state.history:
            if h.get("type") == "round" and (a.index, h["round"]) not in have:
                kept.append({"type": "round", "config": config, "seed": seed, "agent": a.index, "model": a.model,
                             "recovered": True,
                             **{k: h[k] for k in ("round", "reward_mean", "accuracy", "format_rate", "task_score",
                                                  "paired_reward_mean") if k in h}})
    kept.sort(key=lambda r: (r["round"], r["agent"]))
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    os.replace(tmp, path)
    progress.skip(sum(min(rounds, n) for n in done.values()))
    middle = middle_round(rounds)
    # Before any training: the same weights in every configuration of this seed. Agents another worker is
    # measuring are skipped first and waited for after, so two workers share a seed's start evaluations.
    def start(a: Agent, wait: bool) -> dict[str, Any] | None:
        return _held_out(a, start_dir / f"agent-{a.index}.json", "at the start", progress.stream, wait)

    for a in [a for a in agents if a.node.round == 0 and start(a, wait=False) is None]:
        start(a, wait=True)
    for rnd in range(min(done.values()) + 1, rounds + 1):
        for a in agents:
            if a.node.round >= rnd:
                continue
            if middle is not None and a.node.round == middle:  # also after a kill right after that round
                _held_out(a, cell / "evals" / f"agent-{a.index}-round-{middle}.json", "in the middle",
                          progress.stream)
            a.activate()
            try:
                m = a.node.run_round()
            finally:
                a.deactivate()
            append_record(path, round_record(config, seed, a.index, m, a.model))
            progress.tick(f"{config} seed {seed} round {rnd}/{rounds} agent {a.index}: "
                          f"reward {m['reward_mean']:.3f}, trained {m['groups_trained']} groups "
                          f"({m.get('external_groups', 0)} external), {m['round_s']:.0f}s")
    evals: dict[str, dict[str, Any]] = {"eval": {}, "eval_start": {}, "eval_middle": {}}
    for a in agents:
        k = str(a.index)
        evals["eval"][k] = _held_out(a, cell / "evals" / f"agent-{a.index}-round-{a.node.round}.json", "at the end",
                                     progress.stream)
        start = start_dir / f"agent-{a.index}.json"
        if start.exists():
            evals["eval_start"][k] = json.loads(start.read_text())
        mid = cell / "evals" / f"agent-{a.index}-round-{middle}.json"
        if middle is not None and mid.exists():
            evals["eval_middle"][k] = json.loads(mid.read_text())
    _write_json(cell / "done.json", {"config": config, "seed": seed, "rounds": rounds, **evals})


# --- command line -------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=path_arg, help="run directory (records, checkpoints); rerun with it to resume")
    p.add_argument("--config", type=path_arg,
                   help="TOML settings file for every agent, as for `run` (e.g. [task_config.gcd] tables); flags "
                        "override it")
    p.add_argument("--agents", type=int, help="agents per configuration (default 4)")
    p.add_argument("--rounds", type=int, help="rounds per agent (default 20)")
    p.add_argument("--seeds", help="comma-separated seeds (default 0)")
    p.add_argument("--configs", help=f"comma-separated configurations (default {DEFAULT_CONFIGS}); "
                                     "alone|swarm, plus +top, +useful, +rare, +fill, +drop, +topr, +isC")
    p.add_argument("--models",
                   help="comma-separated models (catalog names or .gguf paths); agent k runs the k-th modulo their "
                        "number, in every configuration; name one more than once for a mix (a,a,a,b: one b among "
                        "three a's; each model is loaded once) (default: --model, or the bundled model)")
    p.add_argument("--workers", type=int,
                   help="cells run at a time, each in its own process (default: one per physical core's worth of "
                        "--threads, which defaults to 1 here; at most one per cell)")
    p.add_argument("--heldout-per-seed", action="store_true",
                   help="each seed evaluates on a held-out set of its own (seed s: set s + 1), not every node's set: "
                        "conclusions then rest on seeds x 128 questions")
    p.add_argument("--quick", action="store_true",
                   help="a few minutes: 2 agents, 5 rounds, alone vs swarm (I = J = 2), short answers")


def run(args: argparse.Namespace) -> int:
    if args.out is None:
        raise SapoError("--out DIR is required (the run's records and checkpoints go there)")
    settings = {"model": "smollm2-135m", "preset": "easy"}
    if args.quick:
        settings |= QUICK["settings"]
    file_values, flags = load_toml(args.config) if args.config is not None else {}, flag_settings(args)
    cfg = build_config(settings | file_values, flags)  # an unknown or invalid setting is one error before any work
    settings |= file_values | flags
    settings.setdefault("eval_per_task", eval_per_task(cfg))
    agents = args.agents if args.agents is not None else (QUICK["agents"] if args.quick else 4)
    rounds = args.rounds if args.rounds is not None else (QUICK["rounds"] if args.quick else 20)
    try:
        seeds = [int(s) for s in (args.seeds or (QUICK["seeds"] if args.quick else "0")).split(",") if s.strip()]
    except ValueError:
        raise SapoError(f"--seeds must be comma-separated whole numbers, got {args.seeds!r}") from None
    configs = [c.strip() for c in (args.configs or (QUICK["configs"] if args.quick else DEFAULT_CONFIGS)).split(",")
               if c.strip()]
    if agents > MAX_AGENTS:
        raise SapoError(f"--agents must be at most {MAX_AGENTS} (agent k's identity is made from the byte k + 1), "
                        f"got {agents}")
    if any(s < 0 for s in seeds):
        raise SapoError(f"--seeds must be whole numbers >= 0, got {args.seeds!r}")
    if agents < 1 or rounds < 1 or not seeds or not configs:
        raise SapoError(f"an experiment needs at least one agent, round, seed and configuration "
                        f"(got {agents} agents, {rounds} rounds, seeds {seeds}, configurations {configs})")
    if len(set(configs)) < len(configs) or len(set(seeds)) < len(seeds):
        raise SapoError("each configuration and seed may be named once")
    for c in configs:
        config_overrides(c, 1, 1)  # a typo is an error now, not after an hour
    if args.workers is not None and args.workers < 1:
        raise SapoError(f"--workers must be >= 1, got {args.workers}")
    # One thread per agent unless asked: parallel cells use a small machine's cores better than threads do.
    settings.setdefault("threads", 1)
    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    if models is not None and not models:
        raise SapoError("--models names no model")
    plan = Plan(args.out, configs, seeds, agents, rounds, settings, models=models, heldout_per_seed=args.heldout_per_seed)
    workers = args.workers or default_workers(len(plan.all_cells()), settings["threads"])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    apply_priority(cfg.priority)  # as a node does: the cells' worker processes inherit it
    check_questions(plan)
    check_out_dir(args.out)
    prepare_models(plan)
    run_workers(workers_for(plan, workers))
    left = [f"{c} seed {s}" for c, s in plan.all_cells() if not _finished(cell_dir(plan, c, s), plan.rounds)]
    if left:  # every worker ended without error, so another experiment on this --out held these (``claim``)
        print(f"not run here, another experiment on {args.out} holds them: {', '.join(left)}", file=sys.stderr)
    print(f"done: sapo-engine experiment report {args.out}", file=sys.stderr)
    return 0
