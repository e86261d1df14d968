"""``sapo-engine experiment``: N agents on one machine, through the real protocol, per configuration and seed.

Each agent is a full node (engine/run/node.py): its own Ed25519 identity, question and sampling
streams, LoRA, optimizer and checkpoints, talking to a real relay on 127.0.0.1 (a child process,
engine/lab/relay_child.py). What the agents share is only the memory of the base model: one
llama.cpp model whose LoRA slot is swapped to the agent about to act, and one torch model whose
LoRA weights are swapped likewise (``Backbone``), so 8 agents of the bundled model fit in a few GB.

Agents take turns within a round (agent 0, 1, ..., N-1), so agent k samples its peers' groups of
this round (those before it) and of the last (those after it). A configuration is a name: a base,
``alone`` (I + J own groups, no relay) or ``swarm`` (I own + J external, the paper's uniform
choice), plus modifiers joined with ``+``: ``top``, ``useful`` (``external_selection``), ``fill``
(``fill_dead_slots``), ``drop``, ``topr`` (``external_negatives``), ``isC`` (``importance_cap`` C),
``frontier`` (task levels follow each agent's success rate, engine/tasks/frontier.py).

Layout of ``--out DIR``::

    <config>/seed-<s>/meta.json        # what ran: agents, rounds, settings
    <config>/seed-<s>/records.jsonl    # one line per agent per round (and the final held-out eval)
    <config>/seed-<s>/agent-<k>/       # the agent's data dir: identity, checkpoints, adapters
    <config>/seed-<s>/done.json        # written last: the cell is complete

A killed run resumes where it stopped when started again with the same ``--out``: every agent
resumes from its checkpoint (written each round), records after the last checkpoint are dropped,
and cells with ``done.json`` are skipped. The relay's pool does not survive (agents first after a
resume see fewer external groups for a round; the budget is kept with own groups).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config import NodeConfig, build_config, flag_settings
from engine.errors import SapoError

QUICK = {"agents": 2, "rounds": 5, "configs": "alone,swarm+useful+fill", "seeds": "0",
         "settings": {"local_groups": 2, "external_groups": 2, "completions": 4, "max_tokens": 48,
                      "eval_per_task": 4}}
DEFAULT_CONFIGS = "alone,alone+fill,swarm,swarm+useful+fill"
# A base name means the paper's way whatever the node's defaults are; modifiers change it.
PAPER: dict[str, Any] = {"external_selection": "uniform", "fill_dead_slots": False,
                         "external_negatives": "onpolicy", "importance_cap": 0.0, "share_logprobs": False, "frontier": False}
MODIFIERS: dict[str, dict[str, Any]] = {
    "top": {"external_selection": "top"},
    "useful": {"external_selection": "useful"},
    "fill": {"fill_dead_slots": True},
    "drop": {"external_negatives": "drop"},
    "topr": {"external_negatives": "topr", "share_logprobs": True},
    "frontier": {"frontier": True},
}


def config_overrides(name: str, local: int, external: int) -> dict[str, Any]:
    """The NodeConfig settings a configuration name stands for (see the module docstring)."""
    base, *mods = name.split("+")
    if base == "alone":
        out: dict[str, Any] = {"local_groups": local + external, "external_groups": 0, **PAPER}
    elif base == "swarm":
        out = {"local_groups": local, "external_groups": external, **PAPER}
    else:
        raise SapoError(f"configuration {name!r} must start with 'alone' or 'swarm'")
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


def agent_identity(k: int) -> Any:
    """Agent k's identity: the same in every configuration and seed, so its question stream differs only by seed."""
    from wire.identity import Identity

    return Identity.from_seed(bytes([k + 1]) * 32)


# --- records ----------------------------------------------------------------------------

def read_records(path: Path) -> list[dict[str, Any]]:
    """Complete JSON lines of a records file; a torn last line (a kill mid-write) is left out."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


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
              "round_s", "loss", "per_task", "task_levels", "level_changes")


def round_record(config: str, seed: int, agent: int, metrics: dict[str, Any]) -> dict[str, Any]:
    return {"type": "round", "config": config, "seed": seed, "agent": agent,
            **{k: metrics[k] for k in ROUND_KEYS if k in metrics}}


# --- agents on one backbone -------------------------------------------------------------

class Agent:
    """A node and its LoRA weights while another agent holds the backbone."""

    def __init__(self, index: int, node: Any) -> None:
        self.index = index
        self.node = node
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


class EtaPrinter:
    """One line per agent-round: where the run is, and an ETA from the agent-rounds done so far."""

    def __init__(self, total: int, stream: Any = sys.stderr) -> None:
        self.total, self.done, self.seconds, self.stream = total, 0, 0.0, stream
        self.t0 = time.monotonic()

    def skip(self, n: int) -> None:
        self.total -= n

    def tick(self, seconds: float, text: str) -> None:
        self.done += 1
        self.seconds += seconds
        left = (self.total - self.done) * self.seconds / self.done
        elapsed = time.monotonic() - self.t0
        print(f"[{self.done}/{self.total} agent-rounds, {_hms(elapsed)} elapsed, ETA {_hms(left)}] {text}",
              file=self.stream, flush=True)


def _hms(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def run_plan(plan: Plan, stream: Any = sys.stderr) -> None:
    from engine.lab.relay_child import RelayChild
    from engine.models.hardware import tune_allocator
    from engine.models.prepare import prepare_model
    from engine.run.backbone import Backbone
    from engine.run.event_log import EventLog
    from engine.run.node import Node
    from engine.sharing.keyfile import KEY_FILE, install
    from engine.sharing.swarm_client import SwarmClient

    plan.out.mkdir(parents=True, exist_ok=True)
    tune_allocator()
    base_cfg = build_config({}, plan.settings)
    local, external = base_cfg.local_groups, base_cfg.external_groups
    # Seed-major: a run stopped part-way has every configuration for the seeds it finished, so it compares.
    cells = [(c, s, config_overrides(c, local, external)) for s in plan.seeds for c in plan.configs]
    model = prepare_model(base_cfg, fallback="smollm2-135m")
    base_cfg = model.cfg
    # One backbone for every agent, built as a single node's is; each agent's LoRA is swapped in (Agent).
    backbone = Backbone.load(model, base_cfg, base_cfg.threads or 1)
    progress = EtaPrinter(len(cells) * plan.agents * plan.rounds, stream)
    relay = RelayChild(plan.out / "relay")
    try:
        for config, seed, overrides in cells:
            cell = plan.out / _safe(config) / f"seed-{seed}"
            cfg = dataclasses.replace(base_cfg, **overrides, seed=seed, eval_every=0, relay=None, offline=True)
            if _finished(cell, plan.rounds):
                progress.skip(plan.agents * plan.rounds)
                continue
            (cell / "done.json").unlink(missing_ok=True)  # more rounds asked for than it ran: extend it
            _write_meta(cell, config, seed, plan, cfg)
            agents = []
            for k in range(plan.agents):
                data = cell / f"agent-{k}"
                if not (data / KEY_FILE).exists():
                    data.mkdir(parents=True, exist_ok=True)
                    install(data, agent_identity(k))
                identity = agent_identity(k)
                swarm = None
                if cfg.external_groups > 0:
                    swarm = SwarmClient(relay.url, f"{_safe(config)}-s{seed}", identity, model.name, None,
                                        on_status=lambda _m: None)
                node = Node(cfg, model, identity.node_id, EventLog(), data, swarm, backbone=backbone)
                agents.append(Agent(k, node))
            _run_cell(cell, config, seed, agents, plan.rounds, progress)
            for a in agents:
                a.node.close()
    finally:
        relay.close()
        backbone.close()


def _safe(config: str) -> str:
    return config.replace("+", "_")


def _finished(cell: Path, rounds: int) -> bool:
    done = cell / "done.json"
    return done.exists() and json.loads(done.read_text()).get("rounds", 0) >= rounds


def _write_meta(cell: Path, config: str, seed: int, plan: Plan, cfg: NodeConfig) -> None:
    cell.mkdir(parents=True, exist_ok=True)
    meta = {"config": config, "seed": seed, "agents": plan.agents, "rounds": plan.rounds,
            "settings": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "token"}}
    old = cell / "meta.json"
    if old.exists():
        prev = json.loads(old.read_text())
        speed_only = ("threads", "device", "gpu_layers", "train_memory_mb", "checkpointing", "shared_prefix")
        same = {k: v for k, v in prev.get("settings", {}).items() if k not in speed_only} == \
            {k: v for k, v in meta["settings"].items() if k not in speed_only}
        if prev.get("agents") != plan.agents or not same:
            raise SapoError(f"{cell} holds a run with other settings or agent count; use another --out")
    tmp = cell / "meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, old)


def _run_cell(cell: Path, config: str, seed: int, agents: list[Agent], rounds: int, progress: EtaPrinter) -> None:
    path = cell / "records.jsonl"
    done = {a.index: a.node.round for a in agents}
    kept = keep_records(read_records(path), done)
    have = {(r["agent"], r["round"]) for r in kept}
    for a in agents:  # killed between a checkpoint and its record: the round's summary is in the checkpoint
        for h in a.node.state.history:
            if h.get("type") == "round" and (a.index, h["round"]) not in have:
                kept.append({"type": "round", "config": config, "seed": seed, "agent": a.index, "recovered": True,
                             **{k: h[k] for k in ("round", "reward_mean", "accuracy", "format_rate", "task_score")
                                if k in h}})
    kept.sort(key=lambda r: (r["round"], r["agent"]))
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    os.replace(tmp, path)
    progress.skip(sum(min(rounds, n) for n in done.values()))
    with open(path, "a") as fh:
        for rnd in range(min(done.values()) + 1, rounds + 1):
            for a in agents:
                if a.node.round >= rnd:
                    continue
                a.activate()
                try:
                    m = a.node.run_round()
                finally:
                    a.deactivate()
                fh.write(json.dumps(round_record(config, seed, a.index, m)) + "\n")
                fh.flush()
                progress.tick(m["round_s"], f"{config} seed {seed} round {rnd}/{rounds} agent {a.index}: "
                                            f"reward {m['reward_mean']:.3f}, trained {m['groups_trained']} groups "
                                            f"({m.get('external_groups', 0)} external), {m['round_s']:.0f}s")
    evals = {}
    for a in agents:  # held-out accuracy at the end, greedy and sampled
        a.activate()
        try:
            e = a.node.evaluate()
        finally:
            a.deactivate()
        evals[str(a.index)] = {k: e[k] for k in ("eval_accuracy", "eval_sampled_reward", "eval_sampled_accuracy",
                                                  "eval_questions", "eval_s", "per_task")}
        print(f"{config} seed {seed} agent {a.index} held-out: greedy {e['eval_accuracy']:.3f}, "
              f"sampled {e['eval_sampled_accuracy']:.3f}", file=progress.stream, flush=True)
    tmp = cell / "done.json.tmp"
    tmp.write_text(json.dumps({"config": config, "seed": seed, "rounds": rounds, "eval": evals}, indent=1))
    os.replace(tmp, cell / "done.json")


# --- command line -------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, help="run directory (records, checkpoints); rerun with it to resume")
    p.add_argument("--agents", type=int, help="agents per configuration (default 4)")
    p.add_argument("--rounds", type=int, help="rounds per agent (default 20)")
    p.add_argument("--seeds", help="comma-separated seeds (default 0)")
    p.add_argument("--configs", help=f"comma-separated configurations (default {DEFAULT_CONFIGS}); "
                                     "alone|swarm, plus +top, +useful, +fill, +drop, +topr, +isC")
    p.add_argument("--quick", action="store_true",
                   help="a few minutes: 2 agents, 5 rounds, alone vs swarm (I = J = 2), short answers")


def run(args: argparse.Namespace) -> int:
    if args.out is None:
        raise SapoError("--out DIR is required (the run's records and checkpoints go there)")
    settings = {"model": "smollm2-135m", "preset": "easy"}
    if args.quick:
        settings |= QUICK["settings"]
    settings |= flag_settings(args)
    agents = args.agents or (QUICK["agents"] if args.quick else 4)
    rounds = args.rounds or (QUICK["rounds"] if args.quick else 20)
    try:
        seeds = [int(s) for s in (args.seeds or (QUICK["seeds"] if args.quick else "0")).split(",") if s.strip()]
    except ValueError:
        raise SapoError(f"--seeds must be comma-separated whole numbers, got {args.seeds!r}") from None
    configs = [c.strip() for c in (args.configs or (QUICK["configs"] if args.quick else DEFAULT_CONFIGS)).split(",")
               if c.strip()]
    if agents < 1 or rounds < 1 or not seeds or not configs:
        raise SapoError("an experiment needs at least one agent, round, seed and configuration")
    for c in configs:
        config_overrides(c, 1, 1)  # a typo is an error now, not after an hour
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    run_plan(Plan(args.out, configs, seeds, agents, rounds, settings))
    print(f"done: sapo-engine experiment report {args.out}", file=sys.stderr)
    return 0
