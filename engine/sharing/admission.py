"""Verification of groups received from other nodes: what a receiver trains on, and what it refuses.

A peer's group is trained on only if, in this order (cheap checks first, reasoning-gym last):
1. its spec is one this node would draw itself (``tasks.admit``: ``foreign_task``, ``bad_spec``);
2. it was not trained here before (``replay``);
3. it has at least 2 completions (``too_few``); more than this node's L are subsampled to L;
4. this node's prompt for its question is at most ``max_prompt_tokens`` (``too_long``);
5. its sender has sandbox time left this round (``sender_budget``: refused unscored);
   in the sandbox, the spec regenerates (``bad_spec``) to the question and answer it carries
   (``question_mismatch``, ``answer_mismatch``), within the time limit (``timeout``, ``worker_died``);
6. its question is not (the same content as) a held-out question (``heldout``), and no completion states a
   held-out question with its answer (``heldout_leak``, engine/tasks/leakage.py);
7. every completion, re-scored here, is consistent with the reward its sender claims
   (``reward_mismatch``): claimed = task_score + bonus if well formed, else task_score, with
   one bonus in [0, MAX_FORMAT_BONUS] for the whole group (nodes may shape format
   differently, but nobody may inflate).
Completions longer than this node's ``max_tokens`` (in its own tokens) are cut there and scored
as a cut completion of its own would be (their claims are not checked: the sender scored more
text). The node trains on its own re-scored rewards either way; claims only catch liars.
"""

from __future__ import annotations

import hashlib

import msgspec
import random
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from engine.tasks.groups import Completion, ScoredGroup
from engine.tasks.leakage import LeakCheck
from engine.tasks.rewards import Score, extract_answer, is_well_formed, make_score
from engine.sandbox.safe_scoring import capped
from engine.sandbox.workers import Job, Result, Sandbox
from engine.tasks.questions import Question, TaskEntry, admit, derive_seed, question_key
from wire.protocol import MAX_FORMAT_BONUS, Group, TaskSpec

TOLERANCE = 1e-4
MAX_PROMPT_TOKENS = 2048  # the easy preset's prompts with 2 examples are ~200-400 tokens
REPLAY_MEMORY = 100_000  # specs remembered as trained (16-byte digests: ~10 MB at most)
# Seconds of sandbox work (regeneration + scoring, as the worker measures it) one sender gets per round. An honest
# group costs milliseconds (a sympy task's up to ~0.5 s), so an honest sender's few groups a round fit many times
# over; a flood stops after about this much, plus one job (docs/SECURITY.md "Bounded cost per sender").
SENDER_BUDGET_S = 2.0


@dataclass(frozen=True)
class Verdict:
    reason: str | None  # None = accepted
    question: Question | None = None
    prompt_ids: list[int] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)  # subsampled to L, cut to max_tokens
    scores: list[Score] = field(default_factory=list)  # re-scored here, with this node's format bonus
    cut: int = 0  # completions cut to max_tokens
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.reason is None

    def group(self, source: str) -> ScoredGroup:
        assert self.question is not None
        return ScoredGroup(self.question, self.prompt_ids, self.completions, self.scores, source=source)


@dataclass
class _Pending:
    group: Group
    question: Question
    prompt_ids: list[int]
    completions: list[Completion]
    claims: list[float]  # the sender's rewards for the kept completions
    whole: list[bool]  # not cut: the sender's claim can be checked


def spec_digest(spec: TaskSpec) -> bytes:
    return hashlib.blake2b(spec.key().encode(), digest_size=16).digest()


class Verifier:
    """A receiver's rules for external groups. ``tokenize``/``detokenize``/``prompt_ids`` are its own model's."""

    def __init__(self, mix: tuple[TaskEntry, ...], heldout: list[Question], sandbox: Sandbox, *,
                 tokenize: Callable[[str], list[int]], detokenize: Callable[[list[int]], str],
                 prompt_ids: Callable[[Question], list[int]], completions: int, max_tokens: int,
                 format_bonus: float, any_task: bool = False, max_prompt_tokens: int = MAX_PROMPT_TOKENS,
                 model: str | None = None, sender_budget_s: float = SENDER_BUDGET_S,
                 swarm_admits: Callable[[TaskSpec], bool] | None = None) -> None:
        self.mix = mix
        self.swarm_admits = swarm_admits  # a swarm manifest's rule: any spec within its ranges
        self.sender_budget_s = sender_budget_s
        self.heldout_keys = {question_key(q) for q in heldout}
        self.leak = LeakCheck(heldout)
        self.sandbox = sandbox
        self.tokenize, self.detokenize, self.prompt_ids = tokenize, detokenize, prompt_ids
        self.completions, self.max_tokens = completions, max_tokens
        self.format_bonus, self.any_task, self.max_prompt_tokens = format_bonus, any_task, max_prompt_tokens
        self._trained: OrderedDict[bytes, None] = OrderedDict()
        self.model = model  # the sender's log-probs are only meaningful for the same model (and tokenizer)

    # --- before the sandbox: pure, cheap ---
    def _precheck(self, group: Group) -> _Pending | str:
        reason = admit(group.spec, self.mix, self.any_task, self.swarm_admits)
        if reason is not None:
            return reason
        if spec_digest(group.spec) in self._trained:
            return "replay"
        n = len(group.completions)
        if n < 2:
            return "too_few"
        keep = range(n)
        if n > self.completions:  # the same subset wherever this group is verified
            keep = sorted(random.Random(derive_seed("subsample", group.spec.key())).sample(range(n), self.completions))
        question = Question(group.spec, group.question, group.answer, {})
        prompt = self.prompt_ids(question)
        if len(prompt) > self.max_prompt_tokens:
            return "too_long"
        completions, whole = [], []
        for i in keep:
            text = group.completions[i]
            ids = self.tokenize(text)
            n_text = len(ids)
            whole.append(len(ids) <= self.max_tokens)
            if len(ids) > self.max_tokens:
                ids = ids[:self.max_tokens]
                text = self.detokenize(ids)
            completions.append(Completion(text, ids, "external", self._sender_logprobs(group, i, n_text, len(ids))))
        return _Pending(group, question, prompt, completions, [group.rewards[i] for i in keep], whole)

    def _sender_logprobs(self, group: Group, i: int, n_text: int, n_kept: int) -> list[float] | None:
        """The sender's log-probs of completion i's first ``n_kept`` tokens, if they line up with our
        ``n_text`` ids of its text (one more: its end-of-generation token, which the text lacks); else None.

        Only a weight for engine.learning.offpolicy, truncated there: a sender lying here can at most shrink its
        own group's weight or raise it to the receiver's cap."""
        if group.logprobs is msgspec.UNSET or self.model is None or group.model != self.model:
            return None
        lp = group.logprobs[i]
        return list(lp[:n_kept]) if len(lp) in (n_text, n_text + 1) else None

    def check_many(self, groups: list[Group], senders: list[str] | None = None) -> list[Verdict]:
        """One verdict per group.

        Without ``senders`` all sandbox jobs of the batch run in parallel. With them (one per group: who sent it),
        each sender gets ``sender_budget_s`` seconds of sandbox work for the batch (the node checks one batch a
        round): jobs run in waves, one per sender still within its budget, senders in parallel; a sender's groups
        left once its work passes the budget are refused unscored (``sender_budget``). A sender can so overrun by
        at most one job (itself bounded: engine.sandbox.workers.JOB_CPU_S).
        """
        pre = [self._precheck(g) for g in groups]
        job = {i: Job(p.group.spec, [capped(extract_answer(c.text)) for c in p.completions], p.group.question,
                      p.group.answer) for i, p in enumerate(pre) if isinstance(p, _Pending)}
        results: dict[int, Result | str] = {}
        if senders is None:
            results = dict(zip(job, self.sandbox.run(list(job.values())) if job else []))
        else:
            queues: dict[str, list[int]] = {}
            for i in job:
                queues.setdefault(senders[i], []).append(i)
            spent: Counter[str] = Counter()
            while any(queues.values()):
                wave = []
                for sender, waiting in queues.items():
                    if waiting and spent[sender] >= self.sender_budget_s:
                        results.update((i, "sender_budget") for i in waiting)
                        waiting.clear()
                    elif waiting:
                        wave.append((sender, waiting.pop(0)))
                for (sender, i), result in zip(wave, self.sandbox.run([job[i] for _, i in wave]) if wave else []):
                    spent[sender] += result.seconds
                    results[i] = result
        out = []
        for i, p in enumerate(pre):
            r = results.get(i)
            out.append(Verdict(p) if isinstance(p, str) else Verdict(r) if isinstance(r, str) or r is None
                       else self._postcheck(p, r))
        return out

    def check(self, group: Group) -> Verdict:
        return self.check_many([group])[0]

    # --- after the sandbox ---
    def _postcheck(self, p: _Pending, result: Result) -> Verdict:
        if not result.ok:
            return Verdict(result.reason, seconds=result.seconds)
        if result.key in self.heldout_keys:
            return Verdict("heldout", seconds=result.seconds)
        if any(self.leak.leaks(c.text) for c in p.completions):
            return Verdict("heldout_leak", seconds=result.seconds)
        checkable = [(claim, (ts, is_well_formed(c.text)))
                     for claim, ts, c, ok in zip(p.claims, result.scores, p.completions, p.whole) if ok]
        if not claims_consistent([c for c, _ in checkable], [s for _, s in checkable]):
            return Verdict("reward_mismatch", seconds=result.seconds)
        scores = [make_score(ts, c.text, self.format_bonus) for ts, c in zip(result.scores, p.completions)]
        return Verdict(None, p.question, p.prompt_ids, p.completions, scores,
                       cut=sum(not w for w in p.whole), seconds=result.seconds)

    # --- after training ---
    def remember(self, spec: TaskSpec) -> None:
        """This spec was trained on: any later copy is a replay."""
        self._trained[spec_digest(spec)] = None
        while len(self._trained) > REPLAY_MEMORY:
            self._trained.popitem(last=False)

    def remember_all(self, other: Verifier) -> None:
        """What ``other`` has trained on (a verifier replaced for a new mix): its copies stay replays here."""
        for digest in other._trained:
            self._trained[digest] = None
        while len(self._trained) > REPLAY_MEMORY:
            self._trained.popitem(last=False)


def claims_consistent(claimed: list[float], scored: list[tuple[float, bool]]) -> bool:
    """True if each claim is our task score, plus one shared bonus in [0, MAX_FORMAT_BONUS] where well formed."""
    bonuses = set()
    for claim, (ts, formed) in zip(claimed, scored):
        extra = claim - ts
        if formed and -TOLERANCE <= extra <= MAX_FORMAT_BONUS + TOLERANCE:
            bonuses.add(round(extra, 3))
        elif abs(extra) > TOLERANCE:
            return False
    return len(bonuses) <= 1


def cap_external_tokens(own: list[ScoredGroup], external: list[ScoredGroup], share: float
                        ) -> tuple[list[ScoredGroup], list[ScoredGroup]]:
    """External groups kept so that their completion tokens are at most ``share`` of the update's.

    The longest go first: token-mean loss gives a group weight in proportion to its tokens, so
    without this a peer's long completions would outweigh the node's own experience.
    Returns (kept, dropped); with no own tokens (I = 0) there is nothing to weigh against: all kept.
    """
    def tokens(g: ScoredGroup) -> int:
        return sum(len(c.token_ids) for c in g.completions)

    own_tokens = sum(tokens(g) for g in own)
    if share >= 1.0 or own_tokens == 0:
        return list(external), []
    kept = sorted(external, key=tokens)
    dropped: list[ScoredGroup] = []
    while kept and sum(tokens(g) for g in kept) > share * (own_tokens + sum(tokens(g) for g in kept)):
        dropped.append(kept.pop())
    order = {id(g): i for i, g in enumerate(external)}
    return sorted(kept, key=lambda g: order[id(g)]), dropped

