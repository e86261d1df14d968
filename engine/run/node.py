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
- few-shot prompts: tiny models see 2 worked examples per prompt, each showing a short working before
  the answer tag (engine/tasks/worked_examples.py; the paper: none).
- easy preset: easier task settings for models under 0.5B, which score ~0 on the defaults.
- Q8_0 working copy: a Q4_1 GGUF is requantized to Q8_0 for faster sampling at the source's quality
  (engine/models/working_copy.py).
- external groups are re-verified and re-scored by the receiver (the paper trusts peers); the
  receiver trains on its own scores, never the sender's claims, with its own L and max_tokens,
  and external tokens are at most ``external_token_share`` of an update (engine/sharing/admission.py).
- all scoring, own and external, runs in sandbox worker processes (engine/sandbox/workers.py).
- one policy update per round with ratio 1 (``iterations`` = 1): the clip only acts with more.
- the budget I + J is kept when the swarm gives fewer than J groups (more own questions).
- options measured in docs/RESULTS.md (off by default unless the data say otherwise): which
  external groups to train on (engine/sharing/selection.py), refilling slots of own groups without spread
  (``fill_dead_slots``), and weights for off-policy tokens (engine/learning/offpolicy.py).
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable

import msgspec
import torch
from peft import get_peft_model_state_dict

from engine.models.accel import choose_device, choose_dtype, gpu_layers, memory_budget
from engine.sampling.adapter import AdapterSync
from engine.learning.checkpoint import CheckpointStore, NodeState, lora_digest
from engine.config import NodeConfig
from engine.errors import SapoError
from engine.run.evaluate import evaluate
from engine.run.event_log import EventLog
from engine.sharing.selection import Candidate, candidates_to_sample, dead_slots, rank, update_task_accuracy
from engine.tasks.groups import Completion, ScoredGroup, summarize
from engine.learning.grpo import build_groups
from engine.sampling.llm import LlamaModel
from engine.learning.policy import attach_lora, load_base, lora_config
from engine.run.progress import PhaseReporter, feed_samples
from engine.tasks.rewards import Score
from engine.sampling.rollout import RolloutGenerator, SamplingParams
from engine.sharing.swarm_client import SwarmClient
from engine.learning.trainer import TrainConfig, Trainer
from engine.sandbox.workers import Sandbox, score_groups
from engine.tasks.questions import Prompts, Question, QuestionStream, StreamState, build_mix, derive_seed, heldout_set, question_key
from engine.sharing.admission import Verifier, cap_external_tokens
from wire import events as ev
from wire.identity import display_name
from wire.protocol import Group, StatsReply, group_digest, has_spread

MAX_SEQS_PER_BATCH = 64
SANDBOX_WORKERS = 2  # one stuck on a hostile group's timeout leaves the other scoring


@dataclass
class Backbone:
    """One base model serving several nodes in one process (``sapo-engine experiment``): a llama.cpp
    model whose LoRA slot is swapped per node, a peft model whose LoRA weights are swapped per node,
    and one scoring sandbox. Whoever made it swaps the right node in (engine/lab/experiment.py) and closes it."""

    llm: LlamaModel
    policy: Any  # peft PeftModel with one LoRA; engine.lab.experiment keeps each node's weights
    sandbox: Sandbox
    reset_lora: Callable[[int], None]  # a fresh LoRA from a seed, as attach_lora would make one


class Node:
    """Owns the sampler (llama.cpp), the policy (torch + LoRA) and the node's state."""

    def __init__(self, cfg: NodeConfig, model_path: Path, model_name: str, node_id: str, events: EventLog,
                 threads: int, data_dir: Path, arch: str, cache_dir: Path,
                 swarm: SwarmClient | None = None, backbone: Backbone | None = None) -> None:
        cfg.check_resolved()
        self.cfg = cfg
        self.model_name = model_name
        self.node_id = node_id
        self.events = events
        self.mix = build_mix(cfg.preset, cfg.tasks, cfg.task_weights, cfg.task_config)
        self.backbone = backbone
        # workers load reasoning-gym while the model loads
        self.sandbox = backbone.sandbox if backbone else Sandbox(SANDBOX_WORKERS)
        self.heldout = heldout_set(self.mix, cfg.eval_per_task)
        self._heldout_keys = frozenset(question_key(q) for q in self.heldout)
        self.stream = QuestionStream(self.mix, node_id, cfg.seed, self.heldout)
        budget = cfg.local_groups + cfg.external_groups
        n_seq = min(MAX_SEQS_PER_BATCH, max(budget * cfg.completions, 2))
        self.device = choose_device(cfg.device)
        self.llm = backbone.llm if backbone else LlamaModel(
            model_path, n_ctx=n_seq * cfg.max_tokens + 8192, n_seq_max=n_seq, threads=threads,
            n_gpu_layers=gpu_layers(cfg.gpu_layers, self.device))
        self.generator = RolloutGenerator(self.llm, seed=derive_seed("sampling", node_id, cfg.seed))
        self.params = SamplingParams(cfg.max_tokens, cfg.temperature, cfg.top_k, cfg.top_p, cfg.stop_at_answer,
                                     logprobs=cfg.importance_cap > 0 or cfg.share_logprobs)
        self.prompt_ids = Prompts(self.mix, cfg.fewshot, self._heldout_keys, self.llm.prompt_tokens,
                                  cfg.prompts)
        self.state = NodeState(config=dataclasses.asdict(cfg) | {"token": None, "model_path": str(model_path)},
                               model=model_name)

        lora_seed = derive_seed("lora-init", node_id, cfg.seed) % 2**31
        torch.manual_seed(lora_seed)
        torch.set_num_threads(threads)
        self.train_dtype = choose_dtype(cfg.train_dtype, self.device)
        if backbone is not None:
            self.policy = backbone.policy
            backbone.reset_lora(lora_seed)  # this node's own initial LoRA (a checkpoint, if any, replaces it)
        else:
            base = load_base(model_path, cache_dir / "torch", dtype=self.train_dtype, device=self.device)
            self.policy = attach_lora(base, lora_config(cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout,
                                                        cfg.lora_targets))
        self.trainer = Trainer(self.policy, TrainConfig(
            learning_rate=cfg.learning_rate, optimizer=cfg.optimizer, weight_decay=cfg.weight_decay,
            grad_clip=cfg.grad_clip, micro_batch=cfg.micro_batch, iterations=cfg.iterations,
            eps_low=cfg.eps_low, eps_high=cfg.eps_high, checkpointing=cfg.checkpointing,
            shared_prefix=cfg.shared_prefix,
            memory_budget=memory_budget(cfg.train_memory_mb, self.device),
            external_negatives=cfg.external_negatives, importance_cap=cfg.importance_cap))
        self.sync = AdapterSync(self.llm, data_dir / "adapters", arch)
        self.checkpoints = CheckpointStore(data_dir / "checkpoints")
        self.swarm = swarm
        self._last_stats: StatsReply | None = None  # the relay's view after the last round, for the swarm event
        self.verifier = Verifier(self.mix, self.heldout, self.sandbox, tokenize=self.llm.tokenize,
                                 detokenize=self.llm.detokenize, prompt_ids=self.prompt_ids,
                                 completions=cfg.completions, max_tokens=cfg.max_tokens,
                                 format_bonus=cfg.format_bonus, any_task=cfg.external_any_task, model=model_name)
        self.rejected_total: Counter[str] = Counter()
        self.rejected_by_sender: Counter[str] = Counter()
        self.pause_point: Callable[[], None] = lambda: None  # blocks while a user has paused the node
        self.score_s = 0.0  # scoring time since the round began (own groups and verified external ones)
        self.task_accuracy: dict[str, float] = {}  # running own accuracy per task (external_selection useful)
        self.candidates_seen = 0  # verified external groups offered this round, chosen or not
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
        before, now = Path(state.config.get("model_path") or ""), Path(self.state.config["model_path"])
        if before.name and before.name != now.name:  # e.g. a Q4_0 working copy from before Q8_0 became auto
            self.events.status(f"the checkpoint was trained on {before.name}; continuing on {now.name} "
                               f"(set weights to use the same file)")
        self.state.round, self.state.history = state.round, state.history
        self.stream.state = StreamState(**state.stream)
        self.sync.sync(self.policy)  # llama.cpp samples from the resumed policy
        self.events.emit(ev.Status(message=f"resumed from {latest.name}", round=self.round,
                                   lora_digest=lora_digest(get_peft_model_state_dict(self.policy))))

    # --- prompts and scoring ---
    def score(self, groups: list[tuple[Question, list[Completion]]]) -> list[list[Score]]:
        """Scores for each group's completions: one sandbox job per group, run in parallel."""
        t0 = time.perf_counter()
        scored = score_groups(self.sandbox, groups, self.cfg.format_bonus)
        self.score_s += time.perf_counter() - t0
        for (q, _), (_, result) in zip(groups, scored):
            if not result.ok:  # our own model wrote something a scorer choked on: those answers score 0
                self.events.warning(f"scoring a {q.spec.dataset} group failed ({result.reason}); its answers score 0")
        return [scores for scores, _ in scored]

    def rollout(self, questions: list[Question], params: SamplingParams | None = None,
                n: int | None = None, greedy: int = 0) -> list[ScoredGroup]:
        prompts = [self.prompt_ids(q) for q in questions]
        outs = self.generator.generate(prompts, n or self.cfg.completions, params or self.params, greedy,
                                       self.phases.progress)
        scores = self.score(list(zip(questions, outs)))
        return [ScoredGroup(q, p, cs, sc) for q, p, cs, sc in zip(questions, prompts, outs, scores)]

    # --- the loop ---
    def evaluate(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        self.phases.start(self.round, "evaluating")
        result = evaluate(self.rollout, self.heldout, self.params)
        result["eval_s"] = round(time.perf_counter() - t0, 2)
        self.events.emit(msgspec.convert({"round": self.round, **result}, ev.Eval))
        self.state.history.append({"type": "eval", "round": self.round,
                                   "eval_accuracy": result["eval_accuracy"],
                                   "eval_sampled_reward": result["eval_sampled_reward"],
                                   "eval_sampled_accuracy": result["eval_sampled_accuracy"]})
        return result

    def run_round(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        rnd = self.round + 1
        eval_s = 0.0
        if self.round == 0 and self.cfg.eval_every and not self.state.history:
            eval_s += self.evaluate()["eval_s"]  # the baseline, before any training
        self.score_s = 0.0
        # 1. external groups first: how many arrive decides how many we make ourselves (budget I + J)
        budget = self.cfg.local_groups + self.cfg.external_groups
        if self.swarm is not None:
            self.phases.start(rnd, "external")
        external, spare, rejected = self._external_groups(rnd)
        # 2. rollouts on our own questions
        self.generator.reseed(derive_seed("sampling", self.node_id, self.cfg.seed, rnd))
        n_local = budget - len(external)
        self.phases.start(rnd, "generating", n_local * self.cfg.completions)
        groups = self.rollout(self.stream.draw(n_local))
        gen = self.generator.last
        gen_tokens, gen_s = gen.tokens, gen.seconds
        filled = 0
        if self.cfg.fill_dead_slots:  # own groups without spread train nothing: refill their slots
            dead = dead_slots([has_spread(g.rewards) for g in groups], len(external), budget)
            if self.swarm is None or self.cfg.external_groups == 0:  # alone: one more batch of own draws
                extra = []
                if dead:  # a progress phase of its own, so the GUI's bar does not run backwards
                    self.phases.start(rnd, "generating", dead * self.cfg.completions)
                    extra = self.rollout(self.stream.draw(dead))
                    # (only then: with no extra batch, generator.last is still the first one's)
                    gen_tokens, gen_s = gen_tokens + self.generator.last.tokens, gen_s + self.generator.last.seconds
                groups += extra
                filled = sum(has_spread(g.rewards) for g in extra)
            else:
                filled = min(dead, len(spare))
                external += spare[:filled]
        self.task_accuracy = update_task_accuracy(
            self.task_accuracy, {t: v["accuracy"] for t, v in _per_task(groups).items()})
        external, over_share = cap_external_tokens(groups, external, self.cfg.external_token_share)
        if over_share:
            rejected["token_share"] += len(over_share)
            self.rejected_total["token_share"] += len(over_share)
        self.pause_point()
        # 3. share our groups (plain text) with the swarm
        if self.swarm is not None:
            self.phases.start(rnd, "sharing")
        shared = self._publish(groups, rnd)
        # 4. GRPO update on own + external groups with reward spread
        score_s = self.score_s
        train_groups, dropped = build_groups(groups + external)
        self.pause_point()
        self.phases.start(rnd, "training")
        train = self.trainer.step(train_groups, self.phases.progress)
        self._report(rnd, external)
        for g in external:
            self.verifier.remember(g.question.spec)  # trained: a later copy is a replay
        # 5. hot-swap the new adapter into llama.cpp, then checkpoint
        self.phases.start(rnd, "swapping")
        swap_ms = self.sync.sync(self.policy) if train.tokens else 0.0
        summary = summarize(groups)
        self.state.round = rnd
        self.state.stream = dataclasses.asdict(self.stream.state)
        self.state.history.append({"type": "round", "round": rnd, **{k: round(v, 4) for k, v in summary.items()},
                                   "loss": round(train.loss, 6)})
        # 6. held-out evaluation when due (before the checkpoint, so that its history has it)
        if self.cfg.eval_every and rnd % self.cfg.eval_every == 0:
            eval_s += self.evaluate()["eval_s"]
        t_ckpt = time.perf_counter()
        self.phases.start(rnd, "checkpointing")
        self.checkpoints.save(self.policy, self.trainer.optimizer, self.state)
        metrics: dict[str, Any] = {
            "round": rnd,
            **summary,
            "groups": len(groups),
            "gen_tokens": gen_tokens,
            "gen_s": round(gen_s, 3),
            "gen_tokens_per_s": round(gen_tokens / gen_s, 1) if gen_s > 0 else 0.0,
            "dead_slots_filled": filled,
            "loss": train.loss,
            "score_s": round(score_s, 4),
            "train_s": round(train.seconds, 3),
            "train_prompt_tokens": train.prompt_tokens,
            "train_completion_tokens": train.tokens,
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
        if eval_s:
            metrics["eval_s"] = round(eval_s, 2)
        metrics["round_s"] = round(time.perf_counter() - t0, 3)
        round_event = msgspec.convert(metrics, ev.Round)
        self.events.emit(msgspec.structs.replace(round_event, rollouts=feed_samples(groups, external)))
        if self._last_stats is not None:
            self.events.emit(swarm_event(self._last_stats, self.node_id))
        return metrics

    # --- the swarm ---
    def _external_groups(self, rnd: int) -> tuple[list[ScoredGroup], list[ScoredGroup], Counter[str]]:
        """Up to J groups from other nodes, each verified and re-scored here, chosen by
        ``external_selection``; then the other eligible ones, best first (for ``fill_dead_slots``);
        the refused counted by reason."""
        rejected: Counter[str] = Counter()
        if self.swarm is None or self.cfg.external_groups == 0:
            return [], [], rejected
        tasks = None if self.cfg.external_any_task else sorted({e.dataset for e in self.mix})
        out = []
        screened = []
        n = candidates_to_sample(self.cfg.local_groups, self.cfg.external_groups, self.cfg.external_selection,
                                 self.cfg.fill_dead_slots)
        for shared in self.swarm.sample(n, tasks):
            # Authorship first: nothing of a group is looked at before its signature checks out.
            reason = self.swarm.screen(shared)
            if reason is None:
                screened.append(shared)
                continue
            rejected[reason] += 1
            if reason == "bad_signature":
                self.rejected_by_sender[shared.node_id] += 1  # the claimed sender: unproven
        # Re-encoded with our own tokenizer and template: the sender may run another model.
        t0 = time.perf_counter()
        verdicts = self.verifier.check_many([s.group for s in screened])  # re-scores every completion
        self.score_s += time.perf_counter() - t0
        for shared, verdict in zip(screened, verdicts):
            if not verdict.ok:
                rejected[verdict.reason or "bad_spec"] += 1
                self.rejected_by_sender[shared.node_id] += 1
                continue
            out.append(dataclasses.replace(verdict.group(source=shared.node_id), digest=group_digest(shared.group)))
        self.rejected_total.update(rejected)
        self.candidates_seen = len(out)
        cands = [Candidate(g.question.spec.dataset, summarize([g])["accuracy"], summarize([g])["reward_mean"],
                           has_spread(g.rewards)) for g in out]
        rng = random.Random(derive_seed("external", self.node_id, self.cfg.seed, rnd))
        chosen = [out[i] for i in rank(cands, self.cfg.external_selection, self.task_accuracy, rng)]
        return chosen[:self.cfg.external_groups], chosen[self.cfg.external_groups:], rejected

    def _publish(self, groups: list[ScoredGroup], rnd: int) -> int:
        """Share groups with reward spread (the relay refuses the others); returns how many were accepted."""
        if self.swarm is None:
            return 0
        wire = [Group(spec=g.question.spec, question=g.question.question, answer=g.question.answer,
                      completions=[c.text for c in g.completions], rewards=g.rewards, model=self.model_name,
                      round=rnd, logprobs=_wire_logprobs(g) if self.cfg.share_logprobs else msgspec.UNSET)
                for g in groups if has_spread(g.rewards)]
        ack = self.swarm.publish(wire)
        return ack.accepted if ack is not None else 0

    def _report(self, rnd: int, external: list[ScoredGroup]) -> None:
        """Signed to the relay: the round is done, and these peers' groups were trained (their adoption)."""
        if self.swarm is not None:
            self.swarm.report(rnd, [g.digest for g in external if g.digest and has_spread(g.rewards)])

    def _swarm_metrics(self, rnd: int, external: list[ScoredGroup], rejected: Counter[str], shared: int) -> dict[str, Any]:
        if self.swarm is None:
            return {"external_groups": 0, "rejected_groups": 0, "relay_connected": None, "peers": 0}
        stats = self._last_stats = self.swarm.stats()
        out: dict[str, Any] = {
            "external_groups": len(external),
            "external_candidates": self.candidates_seen,
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
        if self.backbone is None:  # a shared backbone is closed by its owner
            self.sandbox.close()
            self.llm.close()


def _wire_logprobs(g: ScoredGroup) -> Any:
    """The sampler's log-probs of a group's completions, 3 decimals (a few KB a group), if all are known."""
    if any(c.logprobs is None for c in g.completions):
        return msgspec.UNSET
    return [[max(-1000.0, min(0.0, round(x, 3))) for x in c.logprobs or []] for c in g.completions]


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
