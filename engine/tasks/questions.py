"""Questions from reasoning-gym: task mixes, presets, seed streams, the held-out set, prompts.

Every question carries a ``TaskSpec`` (dataset, config, seed, index) from which
reasoning-gym regenerates exactly the same question and answer, on this node or any
other: reasoning-gym seeds item ``i`` of a dataset with ``Random(seed + i)``.

Seed streams. Each node draws from its own stream: per task a 63-bit seed derived from
the node id and the user's seed, and a counter that only moves forward and is saved with
every checkpoint. Seeds are hashed, so two nodes' ``seed + i`` ranges never overlap in
practice. The held-out set uses seeds from a fixed namespace shared by every node (so
evaluations are comparable across the swarm), and its questions are never drawn for
training: a training draw whose content (``content_key``: the question, or what decides it,
e.g. the year of a leap-year question) is held out is skipped, and few-shot examples are never
held-out questions.

A peer's spec is only regenerated if this node would draw it itself (``admit``): its exact
dataset and settings are one of the node's mix, at any level of its frontier ladder
(engine/tasks/frontier.py), or, with ``external_any_task``, within the
size caps of ``ANY_TASK_CAPS``; the index is below ``MAX_INDEX``. Datasets are built with
``size = MAX_INDEX``, never more (some precompute a list that long).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import reasoning_gym

from engine.errors import SapoError
from engine.tasks import frontier
from engine.tasks.caps import ANY_TASK_CAPS, config_within_caps
from engine.tasks.rewards import ANSWER_CLOSE, ANSWER_OPEN, tagged
from engine.tasks.worked_examples import worked_answer
from wire.authorship import MAIN_LANE, derive_seed, stream_seed  # one seed formula for the engine and the wire
from wire.protocol import TaskSpec

# The nine tasks of the paper's controlled experiment, on reasoning-gym's defaults.
PAPER_TASKS = (
    "base_conversion",
    "basic_arithmetic",
    "arc_1d",
    "bf",
    "propositional_logic",
    "fraction_simplification",
    "decimal_arithmetic",
    "calendar_arithmetic",
    "binary_matrix",
)

# Easy settings for tiny models: SmolLM2-135M scores ~0 on reasoning-gym's defaults. Chosen with
# `sapo-engine baseline` (48 held-out questions per task, Q8_0 working copy, worked examples; issue 10,
# docs/BENCHMARKS.md "The easy preset"): tasks where the bundled model's sampled accuracy starts at
# 0.2-0.7, or greedy is well above sampled (room to sharpen), so most groups have reward spread.
# Sampled / greedy at choice: basic_arithmetic 0.42 / 0.79, chain_sum 0.34 / 0.75, leap years
# 0.26 / 0.52, gcd 0.12 / 0.44. Left out: base_conversion (0.02 / 0.00), fraction_simplification
# (0.06 / 0.12), leg_counting (0.01 / 0.10): too little reward for RL to start from.
EASY_CONFIGS: dict[str, dict[str, Any]] = {
    "basic_arithmetic": {
        "min_terms": 2,
        "max_terms": 2,
        "min_digits": 1,
        "max_digits": 1,
        "operators": ["+", "-", "*"],
        "allow_parentheses": False,
        "allow_negation": False,
    },
    "chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
    "calendar_arithmetic": {"tasks": ["is_leap_year"]},
    # Numbers to 20 (400 questions), not 10 (100): a 43-question held-out set then leaves gcd most of its
    # questions, and sharing paid more on new questions (run 14 against run 13, docs/RESULTS.md). Greedy
    # 0.396, sampled 0.115 on 48 held-out questions, as high as to 10.
    "gcd": {"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 20},
}
# The preset's tasks: leap years keep their settings above for whoever names the task, but are not drawn by
# default. A constant "No" is right on three years in four, and that is what every agent learned (all 48 of
# run 11 ended at exactly their held-out set's share of non-leap years; docs/RESULTS.md): it taught no
# reasoning, and a swarm could switch its constant together, a correlated swing in held-out accuracy.
EASY_TASKS: tuple[str, ...] = ("basic_arithmetic", "chain_sum", "gcd")
EASY_WEIGHTS: dict[str, float] = {}

SYSTEM_PROMPT = (
    "You are a careful problem solver. Think briefly, then give only your final answer "
    f"between {ANSWER_OPEN} and {ANSWER_CLOSE} tags."
)


@dataclass(frozen=True)
class TaskEntry:
    """One task of a node's mix: a reasoning-gym dataset, its settings and its weight."""

    dataset: str
    weight: float = 1.0
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Question:
    spec: TaskSpec
    question: str
    answer: str  # "" where the dataset scores from metadata alone
    entry: dict[str, Any]  # reasoning-gym's item, what its scorer needs


def known_datasets() -> list[str]:
    return sorted(reasoning_gym.factory.DATASETS)


def build_mix(preset: str, tasks: list[str] | None = None, weights: dict[str, float] | None = None,
              configs: dict[str, dict[str, Any]] | None = None) -> tuple[TaskEntry, ...]:
    """The task mix: a preset's tasks and settings, then the user's choices on top."""
    if preset == "paper":
        names, base_cfg, base_w = list(PAPER_TASKS), {}, {}
    elif preset == "easy":
        names, base_cfg, base_w = list(EASY_TASKS), EASY_CONFIGS, EASY_WEIGHTS
    else:
        raise SapoError(f"unknown preset {preset!r}: choose 'easy' or 'paper'")
    names = list(tasks) if tasks else names
    weights, configs = weights or {}, configs or {}
    known = set(reasoning_gym.factory.DATASETS)
    for name in [*names, *weights, *configs]:
        if name not in known:
            raise SapoError(f"unknown task {name!r}; see reasoning-gym's list, e.g. {', '.join(PAPER_TASKS[:3])}")
    if not names:
        raise SapoError("the task list is empty")
    mix = []
    for name in dict.fromkeys(names):
        weight = float(weights.get(name, base_w.get(name, 1.0)))
        if not weight > 0:
            raise SapoError(f"task {name!r}: weight must be > 0, got {weight}")
        cfg = {**base_cfg.get(name, {}), **configs.get(name, {})}
        mix.append(TaskEntry(name, weight, cfg))
    for entry in mix:  # fail now, not mid-run, on settings reasoning-gym rejects
        try:  # some settings pass the constructor and fail only when a question is made
            _dataset(entry.dataset, _config_key(entry.config), 0)[0]
        except Exception as exc:  # noqa: BLE001 - reasoning-gym raises assorted types
            raise SapoError(f"task {entry.dataset!r}: invalid settings {entry.config}: {exc}") from None
    return tuple(mix)


def _config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)  # the same as wire.authorship.config_key


# Items do not depend on a dataset's size (item i is seeded with seed + i), but a few datasets
# precompute a list of that length: 2**20 questions per task and seed is ample and cheap.
MAX_INDEX = 2**20


@lru_cache(maxsize=64)
def _dataset(name: str, config_key: str, seed: int) -> Any:
    return reasoning_gym.create_dataset(name, seed=seed, size=MAX_INDEX, **json.loads(config_key))


def regenerate(spec: TaskSpec) -> Question:
    """The question and answer a spec stands for, exactly as its author saw them.

    Runs reasoning-gym on the spec: for a peer's spec only inside the sandbox, after ``admit``.
    """
    if spec.index >= MAX_INDEX:
        raise ValueError(f"index {spec.index} is beyond {MAX_INDEX}")
    ds = _dataset(spec.dataset, _config_key(spec.config), spec.seed)
    item = ds[spec.index]
    return Question(spec, item["question"], item["answer"] or "", item)


def scorer_for(spec: TaskSpec) -> Any:
    return _dataset(spec.dataset, _config_key(spec.config), spec.seed)


def _spec(entry: TaskEntry, seed: int, index: int) -> TaskSpec:
    return TaskSpec(dataset=entry.dataset, config=dict(entry.config), seed=seed, index=index)


# --- which peer specs a node regenerates ------------------------------------------------------

def admit(spec: TaskSpec, mix: tuple[TaskEntry, ...], any_task: bool = False,
          swarm: Callable[[TaskSpec], bool] | None = None) -> str | None:
    """None if this node would regenerate a peer's spec, else the reason (``foreign_task``, ``bad_spec``).

    ``swarm``: the swarm manifest's rule (engine/tasks/swarm_mix.py), when this node follows one: any spec within
    the manifest's ranges is admitted, not only this node's own settings.

    Its own tasks at any level of their frontier ladder (engine/tasks/frontier.py: within the caps) are
    admitted whether or not this node moves its own levels. Pure and cheap: runs before any reasoning-gym
    code sees the spec (a ladder is computed from the node's own configs only, once).
    """
    if spec.index >= MAX_INDEX:
        return "bad_spec"
    if swarm is not None and swarm(spec):
        return None
    key = _config_key(spec.config)
    if any(e.dataset == spec.dataset and _config_key(e.config) == key for e in mix):
        return None
    if any(e.dataset == spec.dataset and frontier.level_of(e.dataset, e.config, spec.config) is not None for e in mix):
        return None
    if not any_task:
        return "foreign_task"
    if spec.dataset not in ANY_TASK_CAPS:
        return "foreign_task"
    return None if config_within_caps(spec.dataset, spec.config) else "bad_spec"


# --- held-out questions and what counts as the same question ---------------------------------

def _normal(text: str) -> str:
    return " ".join(str(text).split()).lower()


def _leap_year_or_question(entry: dict[str, Any]) -> Any:
    meta = entry["metadata"]
    return ["year", meta["year"]] if meta.get("task") == "is_leap_year" else _normal(entry["question"])


# What decides a question, where its wording varies (templates, styles) for the same content.
_CONTENT: dict[str, Callable[[dict[str, Any]], Any]] = {
    "basic_arithmetic": lambda e: _normal(e["metadata"]["expression"]),
    "chain_sum": lambda e: _normal(e["metadata"]["expression"]),
    "base_conversion": lambda e: [e["metadata"][k] for k in ("decimal_value", "source_base", "target_base")],
    "fraction_simplification": lambda e: [e["metadata"]["numerator"], e["metadata"]["denominator"]],
    "binary_matrix": lambda e: e["metadata"]["matrix"],
    "calendar_arithmetic": _leap_year_or_question,
}


def content_key(dataset: str, entry: dict[str, Any]) -> str:
    """Two questions with the same key are the same question: e.g. the year of a leap-year question."""
    try:
        value = _CONTENT[dataset](entry) if dataset in _CONTENT else _normal(entry["question"])
    except (KeyError, TypeError):  # metadata of another reasoning-gym version: fall back to the text
        value = _normal(entry["question"])
    digest = hashlib.blake2b(json.dumps(value, sort_keys=True, default=str).encode(), digest_size=12).hexdigest()
    return f"{dataset}:{digest}"


def question_key(q: Question) -> str:
    return content_key(q.spec.dataset, q.entry)


def heldout_set(mix: tuple[TaskEntry, ...], per_task: int, draw: int = 0) -> list[Question]:
    """The fixed evaluation questions: the same on every node with the same mix (and ``draw``), no two alike.

    ``draw`` 0 is every node's set. An experiment may give each seed another (``heldout_draw``), so that its
    conclusions rest on more questions than one set's; like set 0, they are nobody's question stream."""
    out: list[Question] = []
    seen: set[str] = set()
    for entry in mix:
        seed = derive_seed("heldout", entry.dataset, _config_key(entry.config), *([draw] if draw else []))
        taken = 0
        for i in range(4 * per_task + 16):  # bounded: a tiny task space may not hold per_task distinct ones
            q = regenerate(_spec(entry, seed, i))
            key = question_key(q)
            if key not in seen:
                seen.add(key)
                out.append(q)
                taken += 1
                if taken == per_task:
                    break
    return out


def check_training_room(mix: tuple[TaskEntry, ...], heldout: list[Question], per_task: int) -> None:
    """Refuse, before any work, a task whose held-out set takes most of its questions.

    Easy settings have small question spaces (two one-digit numbers to add: at most 100 questions). A held-out set
    too large for one leaves training a handful of questions, drawn again and again, until the stream
    finds none outside the set and the node stops mid-run. Rule: among the distinct questions a probe of
    the task finds, at least as many must lie outside the held-out set as in it. Seeded, so every node
    with the same mix decides alike.
    """
    held_keys = {question_key(q) for q in heldout}
    for entry in mix:
        held = sum(q.spec.dataset == entry.dataset for q in heldout)
        seed = derive_seed("room", entry.dataset, _config_key(entry.config))
        tries = 8 * per_task + 512  # enough to see most of a small space (draws are not uniform over it)
        found: set[str] = set()
        outside = 0
        for i in range(tries):
            key = question_key(regenerate(_spec(entry, seed, i)))
            if key not in found:
                found.add(key)
                outside += key not in held_keys
                if held == per_task and outside >= held:
                    break  # room enough: large spaces stop here, after about per_task draws
        else:
            raise SapoError(f"task {entry.dataset!r}: its settings hold too few questions for {per_task} held-out "
                            f"ones and training ({len(found)} distinct in {tries} draws, {held} held out, {outside} "
                            f"left); lower eval_per_task or widen the task's settings")


@dataclass
class StreamState:
    """Where a node's question stream stands; saved with each checkpoint."""

    draws: int = 0
    next_index: dict[str, int] = field(default_factory=dict)
    levels: dict[str, dict[str, Any]] = field(default_factory=dict)  # task -> frontier.TaskLevel as a dict


class QuestionStream:
    """A node's own, never-repeating stream of training questions.

    ``lane`` names an independent stream of the same node and seed: the node draws its first I
    questions of a round from lane "main" and any beyond (the J a node alone makes instead of
    receiving, refills of dead slots) from lane "extra", so that within a seed every configuration
    of an experiment trains on the same own questions in the same order (engine/lab/experiment.py).
    A second lane takes its task levels from the main one (``levels_from``): one frontier per node.
    ``factors``: task -> a factor on its weight in the draws (absent: 1): a followed manifest's tasks this node's
    model never gets right, held back (engine/tasks/held_back.py); set by the node, saved in its checkpoint.
    """

    def __init__(self, mix: tuple[TaskEntry, ...], node_id: str, seed: int, heldout: list[Question],
                 state: StreamState | None = None, lane: str = "main",
                 levels_from: "QuestionStream | None" = None) -> None:
        self.mix = mix
        self.node_id = node_id
        self.seed = seed
        self.state = state or StreamState()
        self._excluded = {question_key(q) for q in heldout}
        self.lane = lane
        self._levels = levels_from or self
        self.factors: dict[str, float] = {}

    def _task_seed(self, entry: TaskEntry) -> int:
        # Derived from the node id, so a receiver can check who drew a question (wire.authorship); the main
        # lane keeps the seeds it always had: checkpoints from before lanes draw on unchanged.
        return stream_seed(self.node_id, self.seed, self.lane, entry.dataset, entry.config)

    def draw(self, n: int) -> list[Question]:
        """Draw n questions, tasks chosen by weight with replacement (as in the paper)."""
        out = []
        for _ in range(n):
            lane = () if self.lane == MAIN_LANE else (self.lane,)
            rng = random.Random(derive_seed("pick", self.node_id, self.seed, *lane, self.state.draws))
            entry = rng.choices(self.mix, weights=self.weights())[0]
            self.state.draws += 1
            out.append(self._next_of(entry))
        return out

    def weights(self) -> list[float]:
        """Each task's weight in the draws: the mix's, times its factor where held back."""
        return [e.weight * self.factors[e.dataset] if e.dataset in self.factors else e.weight for e in self.mix]

    def level(self, dataset: str) -> int:
        """The task's current frontier level (0: the mix's settings; moved only with ``frontier``)."""
        return int(self._levels.state.levels.get(dataset, {}).get("level", 0))

    def at_level(self, entry: TaskEntry) -> TaskEntry:
        """A task of the mix with the settings of its current level."""
        level = self.level(entry.dataset)
        return entry if level == 0 else TaskEntry(entry.dataset, entry.weight,
                                                  frontier.config_at(entry.dataset, entry.config, level))

    def _next_of(self, entry: TaskEntry) -> Question:
        entry = self.at_level(entry)
        key = f"{entry.dataset}:{_config_key(entry.config)}"
        seed = self._task_seed(entry)
        # Bounded: tiny task spaces (one-digit sums) can be mostly held out.
        for _ in range(1000):
            index = self.state.next_index.get(key, 0)
            self.state.next_index[key] = index + 1
            q = regenerate(_spec(entry, seed, index))
            if question_key(q) not in self._excluded:
                return q
        raise SapoError(f"task {entry.dataset!r}: its settings leave no questions outside the held-out set")


# How a prompt is made (``--prompts``): the examples' assistant turns (bare answers, or a short
# working first: engine/tasks/worked_examples.py) and whether the system prompt comes first.
PROMPT_STYLES: dict[str, tuple[bool, bool]] = {  # name -> (worked examples, system prompt)
    "old": (False, True),  # before issue 10: system prompt + bare <answer>N</answer> examples
    "worked": (True, True),
    "worked-nosys": (True, False),
}
# The style each task gets under "new" (the default), chosen by measurement (docs/BENCHMARKS.md,
# "Prompts that show the working"); tasks not listed get DEFAULT_STYLE.
# 48 held-out questions per task, greedy + 4 samples, Q8_0: bare answers ("old") kept where worked
# examples cut accuracy and the well-formed rate (base_conversion sampled 0.021 -> 0.005, fmt 0.93 ->
# 0.38; fraction_simplification 0.062 -> 0.016, fmt 0.82 -> 0.36); worked elsewhere. The system
# prompt stays everywhere: without it ("worked-nosys") no task did better.
# Paper preset (reasoning-gym's default difficulty; 16 questions per task, the same command): the bundled
# model answers ~0 with either style except propositional_logic (greedy 0 -> 0.69 with workings) and leap-year
# style calendar questions (0.19 both); elsewhere the well-formed rate decides, and bare answers keep it higher
# (arc_1d 0.05 -> 0, bf 0.31 -> 0.25, decimal_arithmetic 0.56 -> 0.06, binary_matrix equal). Not measured on
# larger models. A task in both presets keeps the easy preset's choice, where accuracies are not 0.
PROMPT_CHOICE: dict[str, str] = {"base_conversion": "old", "fraction_simplification": "old", "arc_1d": "old",
                                 "bf": "old", "decimal_arithmetic": "old", "binary_matrix": "old"}
DEFAULT_STYLE = "worked"


def style_for(dataset: str, prompts: str) -> tuple[bool, bool]:
    """(worked examples, system prompt) of a task under a ``--prompts`` choice."""
    if prompts == "new":
        return PROMPT_STYLES[PROMPT_CHOICE.get(dataset, DEFAULT_STYLE)]
    if prompts not in PROMPT_STYLES:
        raise SapoError(f"unknown prompts {prompts!r}: choose new, {', '.join(PROMPT_STYLES)}")
    return PROMPT_STYLES[prompts]


def fewshot_messages(entry: TaskEntry, k: int, exclude: frozenset[str] | set[str] = frozenset(),
                     worked: bool = False) -> list[dict[str, str]]:
    """k worked examples of a task, as chat turns, from a seed namespace of their own.

    ``exclude``: content keys never shown (the held-out set: an example must not give an answer away).
    ``worked``: the assistant turns show a short working before the tag (engine/tasks/worked_examples.py) where
    the task has one; else just the tagged answer.
    """
    seed = derive_seed("fewshot", entry.dataset, _config_key(entry.config))
    messages: list[dict[str, str]] = []
    index = 0
    while len(messages) < 2 * k and index < 50:
        q = regenerate(_spec(entry, seed, index))
        index += 1
        if question_key(q) in exclude:
            continue
        reply = worked_answer(entry.dataset, q.entry) if worked else None
        if reply is None and q.answer:
            reply = tagged(q.answer)
        if reply is not None:
            messages += [{"role": "user", "content": q.question}, {"role": "assistant", "content": reply}]
    return messages


def build_messages(question: str, fewshot: list[dict[str, str]], system: bool = True) -> list[dict[str, str]]:
    head = [{"role": "system", "content": SYSTEM_PROMPT}] if system else []
    return [*head, *fewshot, {"role": "user", "content": question}]


class Prompts:
    """A node's prompt for any question: its chat template (``render``), its few-shot examples.

    Examples only for tasks of its own mix, at any level of their frontier ladder (a peer's other
    settings are never generated outside the sandbox), never a held-out question (``exclude``: content keys). ``prompts``: a style of
    ``PROMPT_STYLES`` for every task, or "new" (each task's measured choice).
    """

    def __init__(self, mix: tuple[TaskEntry, ...], fewshot: int, exclude: frozenset[str],
                 render: Callable[[list[dict[str, str]]], list[int]], prompts: str = "new") -> None:
        self.mix, self.fewshot, self.exclude, self.render = mix, fewshot, exclude, render
        self.prompts = prompts
        style_for("", prompts)  # an unknown choice fails here, not at the first question
        self._shots: dict[tuple[str, str], tuple[list[dict[str, str]], bool]] = {}

    def __call__(self, q: Question) -> list[int]:
        return self.render(self.messages(q))

    def messages(self, q: Question) -> list[dict[str, str]]:
        key = (q.spec.dataset, _config_key(q.spec.config))
        cached = self._shots.get(key)
        if cached is None:
            worked, system = style_for(q.spec.dataset, self.prompts)
            entry = next((e for e in self.mix if (e.dataset, _config_key(e.config)) == key), None)
            if entry is None:  # a level of an own task (frontier): settings this node draws itself
                entry = next((TaskEntry(e.dataset, e.weight, dict(q.spec.config)) for e in self.mix if e.dataset == key[0]
                              and frontier.level_of(e.dataset, e.config, q.spec.config) is not None), None)
            shots = fewshot_messages(entry, self.fewshot, self.exclude, worked) if entry is not None else []
            cached = self._shots[key] = (shots, system)
        return build_messages(q.question, cached[0], cached[1])
