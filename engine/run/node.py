"""One node's round loop.

``run_round`` is the paper's round, one short method per stage: receive J groups from the swarm
(verified) -> generate L completions for each own question (one llama.cpp batch) and score them ->
share the groups with reward spread -> learn (GRPO on own + external) -> swap the adapter into
llama.cpp -> checkpoint -> one ``round`` event, its metrics built in one place (``_metrics``).
This module wires the stages together; each stage's work lives in its own subpackage.

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
- working copy: a Q4_1 GGUF is converted to BF16 (CPUs with AVX512-BF16) or Q8_0 for faster sampling at
  the source's quality (engine/models/working_copy.py).
- external groups are re-verified and re-scored by the receiver (the paper trusts peers); the
  receiver trains on its own scores, never the sender's claims, with its own L and max_tokens,
  and external tokens are at most ``external_token_share`` of an update (engine/sharing/admission.py).
- all scoring, own and external, runs in sandbox worker processes (engine/sandbox/workers.py).
- one policy update per round with ratio 1 (``iterations`` = 1): the clip only acts with more.
- the budget I + J is kept when the swarm gives fewer than J groups (more own questions).
- options measured in docs/RESULTS.md, on by default where the data say so: which external groups to
  train on (engine/sharing/selection.py; ``useful``, on), refilling slots of own groups without spread
  (``fill_dead_slots``, on), weights for off-policy tokens (engine/learning/offpolicy.py; peers'
  below-average answers weighted 0, ``external_negatives = "drop"``, on; the paper trains them), and task
  levels that follow the own success rate (``frontier``, off).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import msgspec
import torch
from peft import get_peft_model_state_dict

from engine.config import NodeConfig
from engine.errors import SapoError
from engine.learning.checkpoint import NodeState, lora_digest, model_store
from engine.learning.grpo import build_groups
from engine.learning.trainer import TrainConfig, Trainer, TrainStats
from engine.models.accel import memory_budget
from engine.models.prepare import PreparedModel
from engine.run import joining
from engine.run.backbone import Backbone
from engine.run.evaluate import evaluate
from engine.run.event_log import EventLog
from engine.run.progress import PhaseReporter, feed_samples
from engine.sampling.adapter import AdapterSync
from engine.sampling.rollout import RolloutGenerator, SamplingParams
from engine.sandbox.workers import score_groups
from engine.sharing.admission import Verifier, cap_external_tokens
from engine.sharing.selection import Candidate, candidates_to_sample, dead_slots, rank, update_task_accuracy
from engine.sharing.swarm_client import SwarmClient
from engine.tasks import frontier, held_back
from engine.tasks.groups import Completion, ScoredGroup, group_summary, summarize
from engine.tasks.swarm_mix import SwarmMix
from engine.tasks.questions import (Prompts, Question, QuestionStream, StreamState, build_mix, check_training_room,
                                    derive_seed, heldout_set, question_key)
from engine.tasks.rewards import Score
from wire import events as ev
from wire.identity import display_name
from wire.authorship import stream_seed
from wire.protocol import Group, Origin, StatsReply, group_digest, has_spread


@dataclass
class RoundWork:
    """What one round has made so far; ``Node._metrics`` turns it into the round's event."""

    number: int
    own: list[ScoredGroup] = field(default_factory=list)
    main: int = 0  # the first ``main`` own groups come from the main question stream (paired across configurations)
    external: list[ScoredGroup] = field(default_factory=list)  # verified, chosen for training
    spare: list[ScoredGroup] = field(default_factory=list)  # verified, not chosen: for dead slots
    rejected: Counter[str] = field(default_factory=Counter)
    gen_tokens: int = 0
    gen_s: float = 0.0
    gen_prompt_tokens: int = 0  # prompts' tokens, as if each were decoded alone
    gen_prompt_tokens_computed: int = 0  # those decoded (engine/sampling/rollout.py: a shared preamble once)
    dead_slots_filled: int = 0
    shared: int = 0
    score_s: float = 0.0
    train: TrainStats | None = None
    dropped: int = 0
    swap_ms: float = 0.0
    checkpoint_ms: float = 0.0
    eval_s: float = 0.0
    level_changes: dict[str, int] = field(default_factory=dict)  # frontier: task -> +1 / -1
    learning_rate: float = 0.0

    def paired_reward(self) -> float | None:
        """Reward on the main stream's groups only: the questions every paired configuration draws alike,
        so that comparing it is not comparing one configuration's extra draws with another's."""
        return round(summarize(self.own[:self.main])["reward_mean"], 4) if self.main else None


class Node:
    """Owns the node's state and its round; samples and trains on a ``Backbone`` (its own, or shared)."""

    def __init__(self, cfg: NodeConfig, model: PreparedModel, node_id: str, events: EventLog, data_dir: Path,
                 swarm: SwarmClient | None = None, backbone: Backbone | None = None,
                 swarm_mix: SwarmMix | None = None) -> None:
        cfg.check_resolved()
        self.cfg = cfg
        self.model_name = model.name
        self.node_id = node_id
        self.events = events
        # A swarm's manifest (engine/tasks/swarm_mix.py) replaces the node's own task mix; its prompts stay its own.
        self.swarm_mix = swarm_mix
        self.mix = swarm_mix.mix if swarm_mix is not None else build_mix(cfg.preset, cfg.tasks, cfg.task_weights,
                                                                         cfg.task_config)
        self.owns_backbone = backbone is None
        threads = cfg.threads or 1
        torch.set_num_threads(threads)
        self.backbone = backbone or Backbone.load(model, cfg, threads)
        self.llm, self.policy, self.sandbox = self.backbone.llm, self.backbone.policy, self.backbone.sandbox
        self._take_mix()  # held-out set, question streams, prompts, sampling params
        self.generator = RolloutGenerator(self.llm, seed=derive_seed("sampling", node_id, cfg.seed))
        self.state = NodeState(config=dataclasses.asdict(cfg) | {"token": None, "model_path": str(model.path)},
                               model=model.name)
        # This node's own initial LoRA (a checkpoint, if any, replaces it below)
        self.backbone.reset_lora(derive_seed("lora-init", node_id, cfg.seed) % 2**31)
        self.trainer = Trainer(self.policy, TrainConfig.from_settings(
            cfg, memory_budget(cfg.train_memory_mb, self.backbone.device)))
        self.sync = AdapterSync(self.llm, data_dir / "adapters", model.architecture)
        self.checkpoints = model_store(data_dir, model.name)  # each model its own: switching back resumes it
        self.data_dir = data_dir
        self.swarm = swarm
        self._last_stats: StatsReply | None = None  # the relay's view after the last round, for the swarm event
        self.verifier = self._make_verifier()
        self.rejected_total: Counter[str] = Counter()
        self.rejected_by_sender: Counter[str] = Counter()
        self.pause_point: Callable[[], None] = lambda: None  # blocks while a user has paused the node
        self.score_s = 0.0  # scoring time since the round began (own groups and verified external ones)
        self._lr_said: float | None = None  # the learning rate last said in a status line (_learning_rate)
        self.task_accuracy: dict[str, float] = {}  # running own accuracy per task (external_selection useful)
        self.candidates_seen = 0  # verified external groups offered this round, chosen or not
        self.phases = PhaseReporter(events.emit)
        self._resume()
        self._count_held_back(resumed=self.round > 0)
        frontier.check_levels(self.mix, cfg.task_levels)
        for task, level in cfg.task_levels.items():  # starting levels; a checkpoint's levels go on instead
            self.stream.state.levels.setdefault(task, {"level": level, "success": None, "graded": 0})

    def _take_mix(self) -> None:
        """What follows from the mix: held-out set, question streams (their states go on: a question drawn
        before is never drawn again), prompts, sampling params. At start, and when a manifest is adopted."""
        cfg, old = self.cfg, getattr(self, "stream", None)
        self.heldout = heldout_set(self.mix, cfg.eval_per_task, cfg.heldout_draw)
        if old is None:  # at start: a bad setting stops the node now, not when a task's questions run out
            check_training_room(self.mix, self.heldout, cfg.eval_per_task)
        self._heldout_keys = frozenset(question_key(q) for q in self.heldout)
        self.stream = QuestionStream(self.mix, self.node_id, cfg.seed, self.heldout,  # the first I draws of a round
                                     state=old.state if old is not None else None)
        self.extra_stream = QuestionStream(self.mix, self.node_id, cfg.seed, self.heldout, lane="extra",  # beyond I
                                           state=self.extra_stream.state if old is not None else None,
                                           levels_from=self.stream)
        self.params = SamplingParams(cfg.max_tokens, cfg.temperature, cfg.top_k, cfg.top_p, cfg.stop_at_answer,
                                     logprobs=cfg.importance_cap > 0 or cfg.share_logprobs)
        self.prompt_ids = Prompts(self.mix, cfg.fewshot, self._heldout_keys, self.llm.prompt_tokens, cfg.prompts)

    def _make_verifier(self) -> Verifier:
        cfg, mix = self.cfg, self.swarm_mix
        return Verifier(self.mix, self.heldout, self.sandbox, tokenize=self.llm.tokenize,
                        detokenize=self.llm.detokenize, prompt_ids=self.prompt_ids, completions=cfg.completions,
                        max_tokens=cfg.max_tokens, format_bonus=cfg.format_bonus, any_task=cfg.external_any_task,
                        model=self.model_name, swarm_admits=mix.admits if mix is not None else None)

    def _follow_swarm(self) -> None:
        """A node that started alone (its relay unreachable, or without a manifest then) decides on the swarm's
        manifest at the first round boundary after its relay announced one (engine/run/joining.py)."""
        if self.swarm is None or self.swarm_mix is not None:
            return
        self.swarm.ensure_connected()  # no extra tries: it keeps to the client's backoff
        if not joining.pending(self.swarm):
            return
        cfg, mix = joining.follow(self.swarm, self.cfg, self.data_dir, self.events)
        if mix is not None:
            self.adopt(cfg, mix)

    def adopt(self, cfg: NodeConfig, swarm_mix: SwarmMix) -> None:
        """Between rounds: run a manifest's mix and settings (``joining.follow``'s) from the next round on. The
        policy, optimizer and history go on; frontier levels go on only for tasks whose settings are unchanged."""
        cfg.check_resolved()
        before = [(o.dataset, o.config) for o in self.mix]
        same = {e.dataset for e in swarm_mix.mix if (e.dataset, e.config) in before}
        self.cfg, self.swarm_mix, self.mix = cfg, swarm_mix, swarm_mix.mix
        self.stream.state.levels = {t: v for t, v in self.stream.state.levels.items() if t in same}
        self._take_mix()
        trained, self.verifier = self.verifier, self._make_verifier()
        self.verifier.remember_all(trained)  # a group trained before is still a replay
        self.state.config = dataclasses.asdict(cfg) | {"token": None, "model_path": self.state.config["model_path"]}
        for task, level in cfg.task_levels.items():
            self.stream.state.levels.setdefault(task, {"level": level, "success": None, "graded": 0})
        self._count_held_back(resumed=False)

    def _count_held_back(self, resumed: bool) -> None:
        """Held-back tasks (engine/tasks/held_back.py): the counts of the manifest this node follows go on from its
        checkpoint (a resumed node says which tasks it still holds back); another manifest's start over. Without a
        manifest the counts wait, untouched and unused, for the node to follow one again."""
        mix = self.swarm_mix
        if mix is not None and self.state.held_back.get("digest") != mix.digest:
            self.state.held_back = {"digest": mix.digest, "tasks": {}}
        if self._apply_held_back() and resumed and mix is not None:
            tallies = {t: held_back.Tally(**self.state.held_back["tasks"][t]) for t in self.stream.factors}
            self.events.status(held_back.still_line(mix.manifest.swarm, tallies))

    def _apply_held_back(self) -> dict[str, float]:
        """The held-back tasks' factors into both question streams' draws (none without a manifest)."""
        factors = held_back.factors(self.state.held_back.get("tasks", {})) if self.swarm_mix is not None else {}
        factors = {e.dataset: factors[e.dataset] for e in self.mix if e.dataset in factors}
        self.stream.factors, self.extra_stream.factors = dict(factors), dict(factors)
        return factors

    @property
    def round(self) -> int:
        return self.state.round

    @property
    def budget(self) -> int:
        """I + J: groups a round trains on, whoever made them."""
        return self.cfg.local_groups + self.cfg.external_groups

    def _resume(self) -> None:
        latest, passed = self.checkpoints.resume_point()
        for line in passed:  # damaged on disk after it was written: the one before it is as good, a round earlier
            self.events.warning(line)
        if latest is None:
            if passed:
                self.events.warning("no checkpoint of this model verifies: training starts from the beginning")
            return
        state = self.checkpoints.load_state(latest)  # verifies the manifest first
        if state.model and state.model != self.model_name:
            # Two names that make the same folder name (checkpoint.model_folder): never mix their weights.
            raise SapoError(f"{latest} holds a checkpoint of model {state.model!r}, not {self.model_name!r}; "
                            f"move that folder away or use another --data-dir")
        self.checkpoints.load_weights(latest, self.policy, self.trainer.optimizer)
        before, now = Path(state.config.get("model_path") or ""), Path(self.state.config["model_path"])
        if before.name and before.name != now.name:  # e.g. a Q4_0 working copy from before Q8_0 became auto
            self.events.status(f"the checkpoint was trained on {before.name}; continuing on {now.name} "
                               f"(set weights to use the same file)")
        self.state.round, self.state.history = state.round, state.history
        self.state.held_back = state.held_back  # goes on only under the same manifest (_count_held_back)
        self.stream.state = StreamState(**state.stream)
        self.extra_stream.state = StreamState(**state.extra_stream)
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

    # --- the round ---
    def run_round(self) -> dict[str, Any]:
        self._follow_swarm()
        if self.round == 0 and self.cfg.eval_every and not self.state.history:
            # The baseline, before any training: its own time (its eval event's eval_s), not round 1's, so that
            # round 1's round_s is a round's time like any other (the app estimates time remaining from them).
            self.evaluate()
        t0 = time.perf_counter()
        r = RoundWork(self.round + 1)
        self.score_s = 0.0
        self._receive(r)  # 1. external groups first: how many arrive decides how many we make (budget I + J)
        self._generate(r)  # 2. L completions for each own question, scored
        self._fill_dead_slots(r)
        self._cap_external(r)
        self.pause_point()
        self._share(r)  # 3. own groups with reward spread, as plain text
        r.score_s = self.score_s  # (an evaluation below scores too, apart)
        self._learn(r)  # 4. GRPO on own + external groups with reward spread
        self._swap(r)  # 5. the new adapter into llama.cpp
        self._record(r)
        if self.cfg.eval_every and r.number % self.cfg.eval_every == 0:  # before the checkpoint: its history has it
            r.eval_s += self.evaluate()["eval_s"]
        self._checkpoint(r)
        metrics = self._metrics(r, time.perf_counter() - t0)
        round_event = msgspec.convert(metrics, ev.Round)
        self.events.emit(msgspec.structs.replace(round_event, rollouts=feed_samples(r.own, r.external)))
        if self._last_stats is not None:
            self.events.emit(swarm_event(self._last_stats, self.node_id))
        return metrics

    def _receive(self, r: RoundWork) -> None:
        if self.swarm is not None:
            self.phases.start(r.number, "external")
        r.external, r.spare = self._external_groups(r.number, r.rejected)

    def _generate(self, r: RoundWork) -> None:
        self.generator.reseed(derive_seed("sampling", self.node_id, self.cfg.seed, r.number))
        n_local = self.budget - len(r.external)
        self.phases.start(r.number, "generating", n_local * self.cfg.completions)
        main = r.main = min(n_local, self.cfg.local_groups)
        r.own = self.rollout(self.stream.draw(main) + self.extra_stream.draw(n_local - main))
        self._count_generation(r)

    def _count_generation(self, r: RoundWork) -> None:
        last = self.generator.last
        r.gen_tokens += last.tokens
        r.gen_s += last.seconds
        r.gen_prompt_tokens += last.prompt_tokens
        r.gen_prompt_tokens_computed += last.prompt_tokens_computed

    def _fill_dead_slots(self, r: RoundWork) -> None:
        """Own groups without spread train nothing: refill their slots (``fill_dead_slots``)."""
        if not self.cfg.fill_dead_slots:
            return
        dead = dead_slots([has_spread(g.rewards) for g in r.own], len(r.external), self.budget)
        if self.swarm is not None and self.cfg.external_groups > 0:  # with peers: their next-best groups
            r.dead_slots_filled = min(dead, len(r.spare))
            r.external += r.spare[:r.dead_slots_filled]
            return
        if dead:  # alone: one more batch of own draws, a progress phase of its own (the bar never runs back)
            self.phases.start(r.number, "generating", dead * self.cfg.completions)
            extra = self.rollout(self.extra_stream.draw(dead))
            self._count_generation(r)
            r.own += extra
            r.dead_slots_filled = sum(has_spread(g.rewards) for g in extra)

    def _cap_external(self, r: RoundWork) -> None:
        self.task_accuracy = update_task_accuracy(
            self.task_accuracy, {t: v["accuracy"] for t, v in _per_task(r.own).items()})
        r.external, over_share = cap_external_tokens(r.own, r.external, self.cfg.external_token_share)
        if over_share:
            r.rejected["token_share"] += len(over_share)
            self.rejected_total["token_share"] += len(over_share)

    def _share(self, r: RoundWork) -> None:
        if self.swarm is not None:
            self.phases.start(r.number, "sharing")
        r.shared = self._publish(r.own, r.number)

    def _learn(self, r: RoundWork) -> None:
        train_groups, r.dropped = build_groups(r.own + r.external)
        self.pause_point()
        self.phases.start(r.number, "training")
        r.learning_rate = self._learning_rate()
        self.trainer.set_learning_rate(r.learning_rate)
        r.train = self.trainer.step(train_groups, self.phases.progress)
        if r.train.skipped:
            self.events.warning(f"round {r.number}: the update's gradient was not finite, so it was left out "
                                "(the model is unchanged)")
        for g in r.external:
            self.verifier.remember(g.question.spec)  # trained: a later copy is a replay
            if self.swarm is not None and g.digest:
                self.swarm.remember(g.digest, g.source)  # and a later copy of its content, a copy
        self._report(r.number, r.external)

    def _learning_rate(self) -> float:
        """The swarm's rate while the relay link is up, alone's while it is down (engine/config.py): a node cut
        off from its peers trains on its own groups only, where the swarm's larger step overshoots (RESULTS.md,
        run 7). The link is as this round's sample and publish left it. Changes are said once each way."""
        linked = self.swarm is not None and self.swarm.connected and self.cfg.external_groups > 0
        lr = self.cfg.learning_rate if linked or self.swarm is None else self.cfg.learning_rate_alone
        if self.swarm is not None and lr != self._lr_said and self.cfg.learning_rate != self.cfg.learning_rate_alone:
            if self._lr_said is not None or not linked:  # the first round on the swarm's rate is the expected case
                self.events.status(f"training at the swarm's learning rate ({lr:g}) again" if linked else
                                   f"relay unreachable: training at the learning rate of a node alone ({lr:g}), "
                                   f"not the swarm's ({self.cfg.learning_rate:g}), until it is back")
            self._lr_said = lr
        return lr

    def _swap(self, r: RoundWork) -> None:
        self.phases.start(r.number, "swapping")
        r.swap_ms = self.sync.sync(self.policy) if r.train and r.train.tokens else 0.0

    def _move_levels(self, r: RoundWork) -> None:
        """Frontier: each task's level one step towards a success rate of about 0.5 (engine/tasks/frontier.py)."""
        if not self.cfg.frontier:
            return
        by_task = Counter(g.question.spec.dataset for g in r.own)
        rounds = {task: (v["accuracy"], by_task[task]) for task, v in _per_task(r.own).items()}
        tops = {e.dataset: frontier.top_level(e.dataset, e.config) for e in self.mix}
        bounds = self.swarm_mix.bounds if self.swarm_mix is not None else {}
        tops.update({task: high for task, (_, high) in bounds.items()})  # a manifest's level range
        floors = {task: low for task, (low, _) in bounds.items()}
        self.stream.state.levels, r.level_changes = frontier.update_levels(self.stream.state.levels, rounds, tops,
                                                                           floors)

    def _hold_back(self, r: RoundWork) -> None:
        """A followed manifest's task this model never answers right: its own draws at a fraction of its weight, said
        once; its weight back at the first right answer, said once (engine/tasks/held_back.py). With ``frontier``
        only answers at the task's lowest level count: above it, the frontier lowers the task first."""
        mix = self.swarm_mix
        if mix is None:
            return
        counts: dict[str, tuple[int, int, int]] = {}
        for g in r.own:
            spec = g.question.spec
            if self.cfg.frontier and self._level_of(spec) != mix.bounds.get(spec.dataset, (0, 0))[0]:
                continue
            groups, answers, correct = counts.get(spec.dataset, (0, 0, 0))
            counts[spec.dataset] = (groups + 1, answers + len(g.scores), correct + sum(s.correct for s in g.scores))
        before = self.stream.factors
        tasks, changes = held_back.update_all(self.state.held_back.get("tasks", {}), counts)
        self.state.held_back = {"digest": mix.digest, "tasks": tasks}
        after = self._apply_held_back()
        weights = {e.dataset: e.weight for e in self.mix}
        was, now = held_back.shares(weights, before), held_back.shares(weights, after)
        for task, held in changes.items():
            tally = held_back.Tally(**tasks[task])
            self.events.status(held_back.held_line(mix.manifest.swarm, task, tally, was[task], now[task]) if held
                               else held_back.restored_line(mix.manifest.swarm, task, tally))

    def _record(self, r: RoundWork) -> None:
        assert r.train is not None
        self._hold_back(r)  # before the frontier moves: a group's level is the one it was drawn at
        self._move_levels(r)
        self.state.round = r.number
        self.state.stream = dataclasses.asdict(self.stream.state)
        self.state.extra_stream = dataclasses.asdict(self.extra_stream.state)
        paired = {"paired_reward_mean": r.paired_reward()} if r.main else {}
        self.state.history.append({"type": "round", "round": r.number,
                                   **{k: round(v, 4) for k, v in summarize(r.own).items()},
                                   "loss": round(r.train.loss, 6),
                                   **paired})  # an experiment's record lost to a kill keeps its pairing

    def _checkpoint(self, r: RoundWork) -> None:
        t0 = time.perf_counter()
        self.phases.start(r.number, "checkpointing")
        self.checkpoints.save(self.policy, self.trainer.optimizer, self.state)
        r.checkpoint_ms = (time.perf_counter() - t0) * 1000

    def _metrics(self, r: RoundWork, round_s: float) -> dict[str, Any]:
        """The round's figures, in the names of the ``round`` event (docs/EVENTS.md)."""
        train = r.train
        assert train is not None
        metrics: dict[str, Any] = {
            "round": r.number,
            **summarize(r.own),
            "groups": len(r.own),
            "gen_tokens": r.gen_tokens,
            "gen_s": round(r.gen_s, 3),
            "gen_tokens_per_s": round(r.gen_tokens / r.gen_s, 1) if r.gen_s > 0 else 0.0,
            "gen_prompt_tokens": r.gen_prompt_tokens,
            "gen_prompt_tokens_computed": r.gen_prompt_tokens_computed,
            "dead_slots_filled": r.dead_slots_filled,
            "loss": train.loss,
            "learning_rate": r.learning_rate,
            "score_s": round(r.score_s, 4),
            "train_s": round(train.seconds, 3),
            "train_prompt_tokens": train.prompt_tokens_per_group,
            "train_prompt_tokens_computed": train.prompt_tokens,
            "train_completion_tokens": train.tokens,
            "train_completion_tokens_computed": train.tokens_computed,
            "swap_ms": round(r.swap_ms, 2),
            "checkpoint_ms": round(r.checkpoint_ms, 1),
            "groups_trained": len(r.own) + len(r.external) - r.dropped,
            "groups_dropped": r.dropped,
            "tokens_trained": train.tokens,
            "clip_low_frac": round(train.clip_low_frac, 4),
            "clip_high_frac": round(train.clip_high_frac, 4),
            "grad_norm": round(train.grad_norm, 4) if math.isfinite(train.grad_norm) else None,
            "updates_skipped": train.skipped,
            "per_task": _per_task(r.own),
            # In draw order: shows that paired experiment configurations trained on the same questions.
            "own_questions": [question_key(g.question) for g in r.own],
            "paired_reward_mean": r.paired_reward(),
            "group_summaries": [group_summary(g, self.task_accuracy.get(g.question.spec.dataset)
                                              if g.source != "local" else None) for g in r.own + r.external],
            **self._swarm_metrics(r),
        }
        if self.cfg.frontier:
            metrics["task_levels"] = {e.dataset: self.stream.level(e.dataset) for e in self.mix}
            metrics["level_changes"] = r.level_changes
        if self.swarm_mix is not None:
            metrics["tasks_held_back"] = dict(self.stream.factors)
        if r.eval_s:
            metrics["eval_s"] = round(r.eval_s, 2)
        metrics["round_s"] = round(round_s, 3)
        return metrics

    # --- the swarm ---
    def _external_groups(self, rnd: int, rejected: Counter[str]) -> tuple[list[ScoredGroup], list[ScoredGroup]]:
        """Up to J groups from other nodes, each verified and re-scored here, chosen by
        ``external_selection``; then the other eligible ones, best first (for ``fill_dead_slots``);
        the refused counted by reason in ``rejected``."""
        if self.swarm is None or self.cfg.external_groups == 0:
            return [], []
        tasks = None if self.cfg.external_any_task else sorted({e.dataset for e in self.mix})
        out = []
        screened = []
        n = candidates_to_sample(self.cfg.local_groups, self.cfg.external_groups, self.cfg.external_selection,
                                 self.cfg.fill_dead_slots)
        for shared in self.swarm.sample(n, tasks, max_age_s=self.cfg.peer_window_s):
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
        verdicts = self.verifier.check_many([s.group for s in screened],  # re-scores every completion,
                                            [s.node_id for s in screened])  # within each sender's budget
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
                           has_spread(g.rewards), self._level_distance(g.question.spec)) for g in out]
        rng = random.Random(derive_seed("external", self.node_id, self.cfg.seed, rnd))
        chosen = [out[i] for i in rank(cands, self.cfg.external_selection, self.task_accuracy, rng)]
        return chosen[:self.cfg.external_groups], chosen[self.cfg.external_groups:]

    def _level_distance(self, spec: Any) -> int:
        """Frontier: levels between a peer's spec and this node's current level of its task (0: unknown or off)."""
        if not self.cfg.frontier:
            return 0
        level = self._level_of(spec)
        return 0 if level is None else abs(level - self.stream.level(spec.dataset))

    def _level_of(self, spec: Any) -> int | None:
        """A spec's level on the ladder of its task in this node's mix (None: not on it)."""
        entry = next((e for e in self.mix if e.dataset == spec.dataset), None)
        return frontier.level_of(entry.dataset, entry.config, spec.config) if entry is not None else None

    def _publish(self, groups: list[ScoredGroup], rnd: int) -> int:
        """Share groups with reward spread (the relay refuses the others); returns how many were accepted."""
        if self.swarm is None:
            return 0
        wire = [Group(spec=g.question.spec, question=g.question.question, answer=g.question.answer,
                      completions=[c.text for c in g.completions], rewards=g.rewards, model=self.model_name,
                      round=rnd, logprobs=_wire_logprobs(g) if self.cfg.share_logprobs else msgspec.UNSET,
                      origin=origin)
                for g in groups if has_spread(g.rewards)
                if (origin := self._origin(g.question.spec)) is not None]
        ack = self.swarm.publish(wire)
        return ack.accepted if ack is not None else 0

    def _origin(self, spec: Any) -> Origin | None:
        """Which of this node's streams drew a question (wire.authorship: receivers check it), or None."""
        for stream in (self.stream, self.extra_stream):
            if spec.seed == stream_seed(self.node_id, self.cfg.seed, stream.lane, spec.dataset, spec.config):
                return Origin(seed=self.cfg.seed, lane=stream.lane)
        return None

    def _report(self, rnd: int, external: list[ScoredGroup]) -> None:
        """Signed to the relay: the round is done, and these peers' groups were trained (their adoption)."""
        if self.swarm is not None:
            self.swarm.report(rnd, [g.digest for g in external if g.digest and has_spread(g.rewards)])

    def _swarm_metrics(self, r: RoundWork) -> dict[str, Any]:
        external, rejected = r.external, r.rejected
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
            "groups_shared": r.shared,
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
        if self.owns_backbone:  # a shared backbone is closed by its owner
            self.backbone.close()


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
