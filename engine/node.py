"""One node's round loop.

A round: draw I questions -> L completions each (one llama.cpp batch) -> score ->
(share, sample J external groups) -> train -> export + swap the adapter -> checkpoint ->
events. This module wires the pieces together; each piece lives in its own module.

Where this node follows the SAPO paper (arXiv 2509.08721) and where it departs:
- follows: each node trains its own policy on I own + J external groups a round, groups shared
  as plain text (question, L completions, rewards); GRPO with PPO-clip 0.2/0.28 (DAPO), no KL,
  no reference model; nine reasoning-gym tasks in the ``paper`` preset; L = 8, I = J = 4 for
  models of 0.5B and up.
- format bonus: tiny models get +0.1 for a well-formed ``<answer>`` tag (the paper has no
  shaping); accuracy never counts it.
- few-shot prompts: tiny models see 2 worked examples per prompt (the paper: none).
- easy preset: easier task settings for models under 0.5B, which score ~0 on the defaults.
- Q4_0 working copy: a Q4_1 GGUF is requantized to Q4_0 for faster sampling (engine/weights.py).
- external groups are re-verified and re-scored by the receiver (the paper trusts peers); the
  receiver trains on its own scores, never the sender's claims.
- one policy update per round with ratio 1 (``iterations`` = 1): the clip only acts with more.
- the budget I + J is kept when the swarm gives fewer than J groups (more own questions).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import msgspec
import torch
from peft import get_peft_model_state_dict

from engine.adapter import AdapterSync
from engine.checkpoint import CheckpointStore, NodeState, lora_digest
from engine.config import NodeConfig
from engine.errors import SapoError
from engine.evaluate import evaluate
from engine.events import EventLog
from engine.groups import Completion, ScoredGroup, summarize
from engine.grpo import build_sequences
from engine.llm import LlamaModel
from engine.policy import attach_lora, load_base, lora_config
from engine.progress import PhaseReporter, feed_samples
from engine.rewards import Score, score_completion
from engine.rollout import RolloutGenerator, SamplingParams
from engine.swarm import SwarmClient
from engine.trainer import TrainConfig, Trainer
from engine.verify import verify_group
from engine.tasks import (Question, QuestionStream, StreamState, TaskEntry, build_messages, build_mix, derive_seed,
                          fewshot_messages, heldout_set, scorer_for)
from wire import events as ev
from wire.protocol import Group, StatsReply, display_name, has_spread

MAX_SEQS_PER_BATCH = 64


class Node:
    """Owns the sampler (llama.cpp), the policy (torch + LoRA) and the node's state."""

    def __init__(self, cfg: NodeConfig, model_path: Path, model_name: str, node_id: str, events: EventLog,
                 threads: int, data_dir: Path, arch: str, cache_dir: Path,
                 swarm: SwarmClient | None = None) -> None:
        cfg.check_resolved()
        self.cfg = cfg
        self.model_name = model_name
        self.node_id = node_id
        self.events = events
        self.mix = build_mix(cfg.preset, cfg.tasks, cfg.task_weights, cfg.task_config)
        self.heldout = heldout_set(self.mix, cfg.eval_per_task)
        self.stream = QuestionStream(self.mix, node_id, cfg.seed, self.heldout)
        budget = cfg.local_groups + cfg.external_groups
        n_seq = min(MAX_SEQS_PER_BATCH, max(budget * cfg.completions, 2))
        self.llm = LlamaModel(model_path, n_ctx=n_seq * cfg.max_tokens + 8192, n_seq_max=n_seq, threads=threads)
        self.generator = RolloutGenerator(self.llm, seed=derive_seed("sampling", node_id, cfg.seed))
        self.params = SamplingParams(cfg.max_tokens, cfg.temperature, cfg.top_k, cfg.top_p, cfg.stop_at_answer)
        self._fewshot: dict[str, list[dict[str, str]]] = {}
        self.state = NodeState(config=dataclasses.asdict(cfg) | {"token": None, "model_path": str(model_path)},
                               model=model_name)

        torch.manual_seed(derive_seed("lora-init", node_id, cfg.seed) % 2**31)
        torch.set_num_threads(threads)
        base = load_base(model_path, cache_dir / "torch")
        self.policy = attach_lora(base, lora_config(cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_targets))
        self.trainer = Trainer(self.policy, TrainConfig(
            learning_rate=cfg.learning_rate, optimizer=cfg.optimizer, weight_decay=cfg.weight_decay,
            grad_clip=cfg.grad_clip, micro_batch=cfg.micro_batch, iterations=cfg.iterations,
            eps_low=cfg.eps_low, eps_high=cfg.eps_high))
        self.sync = AdapterSync(self.llm, data_dir / "adapters", arch)
        self.checkpoints = CheckpointStore(data_dir / "checkpoints")
        self.swarm = swarm
        self._last_stats: StatsReply | None = None  # the relay's view after the last round, for the swarm event
        self.rejected_total: Counter[str] = Counter()
        self.rejected_by_sender: Counter[str] = Counter()
        self.pause_point: Callable[[], None] = lambda: None  # blocks while a user has paused the node
        self.phases = PhaseReporter(events.emit)
        self._resume()

    @property
    def round(self) -> int:
        return self.state.round

    def _resume(self) -> None:
        latest = self.checkpoints.latest()
        if latest is None:
            return
        state = self.checkpoints.load_state(latest)  # verifies the manifest first
        if state.model and state.model != self.model_name:
            raise SapoError(f"the data dir holds a checkpoint for model {state.model!r}, not {self.model_name!r}; "
                            f"use another --data-dir or the same model")
        self.checkpoints.load_weights(latest, self.policy, self.trainer.optimizer)
        self.state.round, self.state.history = state.round, state.history
        self.stream.state = StreamState(**state.stream)
        self.sync.sync(self.policy)  # llama.cpp samples from the resumed policy
        self.events.emit(ev.Status(message=f"resumed from {latest.name}", round=self.round,
                                   lora_digest=lora_digest(get_peft_model_state_dict(self.policy))))

    # --- prompts and scoring ---
    def prompt_ids(self, q: Question) -> list[int]:
        """The node's own prompt for a question: its chat template, its few-shot examples."""
        key = q.spec.dataset + json.dumps(q.spec.config, sort_keys=True)
        shots = self._fewshot.get(key)
        if shots is None:
            entry = TaskEntry(q.spec.dataset, config=dict(q.spec.config))
            shots = self._fewshot[key] = fewshot_messages(entry, self.cfg.fewshot)
        return self.llm.prompt_tokens(build_messages(q.question, shots))

    def score(self, q: Question, completions: list[Completion]) -> list[Score]:
        scorer = scorer_for(q.spec)
        return [score_completion(scorer, q.entry, c.text, self.cfg.format_bonus) for c in completions]

    def rollout(self, questions: list[Question], params: SamplingParams | None = None,
                n: int | None = None) -> list[ScoredGroup]:
        prompts = [self.prompt_ids(q) for q in questions]
        outs = self.generator.generate(prompts, n or self.cfg.completions, params or self.params,
                                       self.phases.progress)
        return [ScoredGroup(q, p, cs, self.score(q, cs)) for q, p, cs in zip(questions, prompts, outs)]

    # --- the loop ---
    def evaluate(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        self.phases.start(self.round, "evaluating")
        result = evaluate(self.rollout, self.heldout, self.params)
        result["eval_s"] = round(time.perf_counter() - t0, 2)
        self.events.emit(msgspec.convert({"round": self.round, **result}, ev.Eval))
        self.state.history.append({"type": "eval", "round": self.round,
                                   "eval_accuracy": result["eval_accuracy"],
                                   "eval_sampled_reward": result["eval_sampled_reward"]})
        return result

    def run_round(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        rnd = self.round + 1
        if self.round == 0 and self.cfg.eval_every and not self.state.history:
            self.evaluate()  # the baseline, before any training
        # 1. external groups first: how many arrive decides how many we make ourselves (budget I + J)
        if self.swarm is not None:
            self.phases.start(rnd, "external")
        external, rejected = self._external_groups()
        # 2. rollouts on our own questions
        self.generator.reseed(derive_seed("sampling", self.node_id, self.cfg.seed, rnd))
        n_local = self.cfg.local_groups + self.cfg.external_groups - len(external)
        self.phases.start(rnd, "generating", n_local * self.cfg.completions)
        groups = self.rollout(self.stream.draw(n_local))
        gen = self.generator.last
        self.pause_point()
        # 3. share our groups (plain text) with the swarm
        if self.swarm is not None:
            self.phases.start(rnd, "sharing")
        shared = self._publish(groups, rnd)
        # 4. GRPO update on own + external groups with reward spread
        samples, dropped = build_sequences(groups + external)
        self.pause_point()
        self.phases.start(rnd, "training")
        train = self.trainer.step(samples, self.phases.progress)
        # 5. hot-swap the new adapter into llama.cpp, then checkpoint
        self.phases.start(rnd, "swapping")
        swap_ms = self.sync.sync(self.policy) if samples else 0.0
        summary = summarize(groups)
        self.state.round = rnd
        self.state.stream = dataclasses.asdict(self.stream.state)
        self.state.history.append({"type": "round", "round": rnd, **{k: round(v, 4) for k, v in summary.items()},
                                   "loss": round(train.loss, 6)})
        # 6. held-out evaluation when due (before the checkpoint, so that its history has it)
        if self.cfg.eval_every and rnd % self.cfg.eval_every == 0:
            self.evaluate()
        t_ckpt = time.perf_counter()
        self.phases.start(rnd, "checkpointing")
        self.checkpoints.save(self.policy, self.trainer.optimizer, self.state)
        metrics: dict[str, Any] = {
            "round": rnd,
            **summary,
            "groups": len(groups),
            "gen_tokens": gen.tokens,
            "gen_s": round(gen.seconds, 3),
            "gen_tokens_per_s": round(gen.tokens_per_s, 1),
            "loss": train.loss,
            "train_s": round(train.seconds, 3),
            "swap_ms": round(swap_ms, 2),
            "checkpoint_ms": round((time.perf_counter() - t_ckpt) * 1000, 1),
            "groups_trained": len(groups) + len(external) - dropped,
            "groups_dropped": dropped,
            "tokens_trained": train.tokens,
            "clip_low_frac": round(train.clip_low_frac, 4),
            "clip_high_frac": round(train.clip_high_frac, 4),
            "grad_norm": round(train.grad_norm, 4),
            "per_task": _per_task(groups),
            **self._swarm_metrics(rnd, external, rejected, shared),
        }
        metrics["round_s"] = round(time.perf_counter() - t0, 3)
        round_event = msgspec.convert(metrics, ev.Round)
        self.events.emit(msgspec.structs.replace(round_event, rollouts=feed_samples(groups, external)))
        if self._last_stats is not None:
            self.events.emit(swarm_event(self._last_stats, self.node_id))
        return metrics

    # --- the swarm ---
    def _external_groups(self) -> tuple[list[ScoredGroup], Counter[str]]:
        """J groups from other nodes, each verified and re-scored here; the rest counted by reason."""
        rejected: Counter[str] = Counter()
        if self.swarm is None or self.cfg.external_groups == 0:
            return [], rejected
        tasks = None if self.cfg.external_any_task else sorted({e.dataset for e in self.mix})
        out = []
        for shared in self.swarm.sample(self.cfg.external_groups, tasks):
            verdict = verify_group(shared.group, self.cfg.format_bonus)
            if not verdict.ok or verdict.question is None:
                rejected[verdict.reason or "bad_spec"] += 1
                self.rejected_by_sender[shared.node_id] += 1
                continue
            # Re-encoded with our own tokenizer and template: the sender may run another model.
            completions = [Completion(t, self.llm.tokenize(t), "external") for t in shared.group.completions]
            out.append(ScoredGroup(verdict.question, self.prompt_ids(verdict.question), completions, verdict.scores,
                                   source=shared.node_id))
        self.rejected_total.update(rejected)
        return out, rejected

    def _publish(self, groups: list[ScoredGroup], rnd: int) -> int:
        """Share groups with reward spread (the relay refuses the others); returns how many were accepted."""
        if self.swarm is None:
            return 0
        wire = [Group(spec=g.question.spec, question=g.question.question, answer=g.question.answer,
                      completions=[c.text for c in g.completions], rewards=g.rewards, model=self.model_name,
                      round=rnd)
                for g in groups if has_spread(g.rewards)]
        ack = self.swarm.publish(wire)
        self.swarm.report(rnd)
        return ack.accepted if ack is not None else 0

    def _swarm_metrics(self, rnd: int, external: list[ScoredGroup], rejected: Counter[str], shared: int) -> dict[str, Any]:
        if self.swarm is None:
            return {"external_groups": 0, "rejected_groups": 0, "relay_connected": None, "peers": 0}
        stats = self._last_stats = self.swarm.stats()
        out: dict[str, Any] = {
            "external_groups": len(external),
            "external_reward_mean": round(summarize(external)["reward_mean"], 4) if external else None,
            "rejected_groups": sum(rejected.values()),
            "rejected_reasons": dict(rejected),
            "rejected_total": sum(self.rejected_total.values()),
            "rejected_by_sender": dict(self.rejected_by_sender.most_common(10)),  # node id -> groups, since start
            "groups_shared": shared,
            "relay_connected": self.swarm.connected,
            "peers": self.swarm.peers,
        }
        if stats is not None:
            out |= {"shared_total": stats.you.groups_shared, "adopted_total": stats.you.groups_adopted,
                    "swarm_groups_per_minute": round(stats.groups_per_minute, 2)}
        return out

    def set_threads(self, threads: int) -> None:
        self.llm.set_threads(threads)
        torch.set_num_threads(threads)

    def close(self) -> None:
        if self.swarm is not None:
            self.swarm.close()
        self.llm.close()


def swarm_event(stats: StatsReply, node_id: str) -> ev.Swarm:
    """The relay's stats as the dashboard's ``swarm`` event (names derived from ids, never taken from peers)."""
    rows = [ev.LeaderRow(r.node_id, display_name(r.node_id), r.groups_shared, r.groups_adopted, r.rounds)
            for r in stats.leaderboard]
    rank = next((i + 1 for i, r in enumerate(rows) if r.node_id == node_id), None)
    you = stats.you
    return ev.Swarm(peers_online=stats.peers_online, groups_per_minute=round(stats.groups_per_minute, 2),
                    leaderboard=rows, you=ev.LeaderRow(you.node_id, display_name(you.node_id), you.groups_shared,
                                                       you.groups_adopted, you.rounds), rank=rank)


def _per_task(groups: list[ScoredGroup]) -> dict[str, dict[str, float]]:
    by_task: dict[str, list[ScoredGroup]] = {}
    for g in groups:
        by_task.setdefault(g.question.spec.dataset, []).append(g)
    return {task: {"accuracy": round(summarize(gs)["accuracy"], 4), "reward_mean": round(summarize(gs)["reward_mean"], 4)}
            for task, gs in by_task.items()}
