"""The engine <-> app contract: events out of a node, commands into it, as typed structs.

A node writes one event per line as JSON (``sapo-engine run --events -`` on stdout, or
``--events FILE``) and, with ``--control stdin``, reads one command per line on stdin. The
GUI speaks exactly this and nothing else, so both sides import these definitions.

Compatibility rules (the schema version is ``SCHEMA_VERSION``, sent in ``start``):
- fields are only ever added, each with a default, so an older reader ignores new fields
  and a newer reader fills old files' gaps (``decode_event`` does not forbid unknown fields);
- a removed or retyped field bumps ``SCHEMA_VERSION``;
- an unknown ``type`` decodes to ``None``, never an exception, so an old GUI survives a
  newer engine.
docs/EVENTS.md describes every event for people; this module is what is checked.

Imports msgspec only: no torch, no Qt, no llama.cpp.
"""

from __future__ import annotations

import time as _time
from typing import Any, Literal

import msgspec

SCHEMA_VERSION = 1


def _now() -> float:
    return round(_time.time(), 3)


class Event(msgspec.Struct, tag_field="type", kw_only=True, frozen=True):
    """Base of every event: its ``type`` tag and the wall-clock ``time`` it was made."""

    time: float = msgspec.field(default_factory=_now)


# --- a run's life ----------------------------------------------------------------------

class Start(Event, tag="start", frozen=True):
    """After set-up, before the first round: who this node is and what it will do."""

    node_id: str
    node_name: str
    model: str
    model_path: str
    round_start: int
    round_end: int | None  # None: until stopped
    threads: int
    settings: dict[str, Any] = {}  # every NodeConfig field, resolved, secrets left out
    schema: int = SCHEMA_VERSION
    # Where it computes (engine/models/accel.py): torch trains on "cuda" | "mps" | "cpu", llama.cpp samples on
    # "gpu" | "cpu"; "" from engines before these fields. accel_fix: the command that lets this install use the
    # machine's idle GPU, "" when none sits idle.
    trains_on: str = ""
    samples_on: str = ""
    accel_fix: str = ""
    # The tasks this node draws from, in short words: its swarm's manifest's (wire.manifest.mix_summary) where it
    # follows one (``manifest``: that manifest's digest), else its own mix's (the preset's, or --tasks).
    mix: list[str] = []
    manifest: str = ""
    task_mix: list[str] = []  # the tasks an ``ask`` may draw from ("tasks" is a setting in old, flat files)


State = Literal["running", "paused", "finishing", "stopping"]


class StateChanged(Event, tag="state", frozen=True):
    """The loop really is in this state now (not: a command asking for it has arrived).

    ``finishing``: the round in flight completes, then the node pauses.
    """

    state: State
    round: int = 0


Phase = Literal["external", "generating", "scoring", "sharing", "training", "swapping", "evaluating", "checkpointing"]


class PhaseProgress(Event, tag="phase", frozen=True):
    """Progress inside a round: ``done`` of ``total`` units (sequences, micro-batches, questions)."""

    round: int
    phase: Phase
    done: int = 0
    total: int = 0


class Download(Event, tag="download", frozen=True):
    """A model file being fetched; ``total_bytes`` 0 while unknown."""

    file: str
    done_bytes: int
    total_bytes: int = 0
    finished: bool = False


class Status(Event, tag="status", frozen=True):
    """Something a person should know (connected, resumed, ...)."""

    message: str
    round: int | None = None
    lora_digest: str | None = None


class Warning(Event, tag="warning", frozen=True):  # noqa: A001 - the event's name on the wire
    """Something went wrong that the node survived (a bad command line, a relay hiccup)."""

    message: str


class ErrorEvent(Event, tag="error", frozen=True):
    """The node is about to exit non-zero: ``message`` is the one line a user sees."""

    message: str
    kind: Literal["user", "bug"] = "user"


class Stop(Event, tag="stop", frozen=True):
    round: int
    reason: str


# --- a round ---------------------------------------------------------------------------

class TaskRound(msgspec.Struct, frozen=True):
    accuracy: float
    reward_mean: float


class RolloutSample(msgspec.Struct, frozen=True):
    """One completion for the dashboard's feed: short texts, never whole prompts."""

    task: str
    question: str  # cut to a few hundred characters
    answer: str | None  # the extracted <answer>, None when there was none
    reward: float
    correct: bool
    source: str  # "own", or the sender's display name


class GroupSummary(msgspec.Struct, frozen=True):
    """One group a round trained on or dropped (engine.tasks.groups.group_summary): what the analysis of
    sharing reads (which groups were trained, how the receiver scored them, how many pushed up or down)."""

    task: str
    source: str  # "own", or the first characters of the sender's node id
    completions: int
    correct: int  # fully correct completions, as this node scored them
    positives: int  # completions above the group's mean reward (GRPO pushes them up)
    negatives: int  # ... below it (pushed down)
    spread: bool  # rewards differ: the group reached the update
    own_accuracy: float | None = None  # external groups: this node's running accuracy on the task


class Round(Event, tag="round", frozen=True):
    """After each round. Times in seconds unless the name says ms."""

    round: int
    reward_mean: float
    accuracy: float  # fully correct answers only, never the format bonus
    format_rate: float
    task_score: float
    groups: int  # own groups generated
    gen_tokens: int
    gen_s: float
    gen_tokens_per_s: float
    loss: float
    train_s: float
    swap_ms: float
    checkpoint_ms: float
    groups_trained: int
    groups_dropped: int  # no reward spread
    tokens_trained: int
    clip_low_frac: float
    clip_high_frac: float
    grad_norm: float | None  # before clipping; None when it was not finite and the update was left out
    round_s: float
    per_task: dict[str, TaskRound] = {}
    score_s: float = 0.0
    train_prompt_tokens: int = 0  # trained groups' prompt tokens, each group's counted once
    train_prompt_tokens_computed: int = 0  # those training ran (a micro-batch's common beginning once)
    train_completion_tokens: int = 0
    train_completion_tokens_computed: int = 0  # those training ran (completions without gradient are skipped)
    gen_prompt_tokens: int = 0  # the round's prompts' tokens, as if each were decoded alone
    gen_prompt_tokens_computed: int = 0  # those sampling actually decoded (a task's shared preamble once)
    updates_skipped: int = 0  # optimizer steps left out: their gradient was not finite (the model is unchanged)
    learning_rate: float = 0.0  # this round's step size: the swarm's while the relay is reachable, else alone's
    eval_s: float | None = None  # rounds that evaluated
    dead_slots_filled: int = 0  # own groups without spread replaced (fill_dead_slots): extra draws or swarm groups
    paired_reward_mean: float | None = None  # reward on the main question stream's groups (paired experiments)
    # the swarm: relay_connected is None when no relay is configured
    external_groups: int = 0
    rejected_groups: int = 0
    relay_connected: bool | None = None
    peers: int = 0
    external_reward_mean: float | None = None
    rejected_reasons: dict[str, int] = {}
    rejected_total: int = 0
    rejected_by_sender: dict[str, int] = {}  # sender node id -> groups, top 10 since start
    groups_shared: int = 0
    shared_total: int | None = None
    adopted_total: int | None = None
    swarm_groups_per_minute: float | None = None
    rollouts: list[RolloutSample] = []
    task_levels: dict[str, int] = {}  # frontier: each task's difficulty level after the round (0: the mix's settings)
    level_changes: dict[str, int] = {}  # frontier: tasks whose level moved this round, +1 or -1
    group_summaries: list[GroupSummary] = []  # every own and external group of the round, in training order
    # A followed manifest's tasks this node's model never answered right (engine/tasks/held_back.py): task -> the
    # factor on its weight in the node's own draws after the round; {} without a manifest or with none held back
    tasks_held_back: dict[str, float] = {}


class TaskEval(msgspec.Struct, frozen=True):
    eval_accuracy: float
    eval_sampled_reward: float
    eval_sampled_accuracy: float | None = None


class Eval(Event, tag="eval", frozen=True):
    """Held-out evaluation: before round 1, then every ``eval_every`` rounds."""

    round: int
    eval_accuracy: float  # greedy pass@1
    eval_sampled_reward: float  # at the training temperature, format bonus included
    eval_questions: int
    eval_s: float
    per_task: dict[str, TaskEval] = {}
    eval_sampled_accuracy: float | None = None  # at the training temperature, fully correct only
    # Each held-out question, in held-out order: (its key, greedy correct 0/1, sampled answers correct), so that
    # two runs on one held-out set can be compared question by question (benchmarks/bench_leak_training.py).
    per_question: list[tuple[str, int, int]] = []


class LeaderRow(msgspec.Struct, frozen=True):
    node_id: str
    name: str
    groups_shared: int
    groups_adopted: int
    rounds: int


class Swarm(Event, tag="swarm", frozen=True):
    """The swarm as the relay sees it, after each round with a relay."""

    peers_online: int
    groups_per_minute: float
    leaderboard: list[LeaderRow] = []
    you: LeaderRow | None = None
    rank: int | None = None  # this node's place on the leaderboard, 1-based; None when not on it


class Relay(Event, tag="relay", frozen=True):
    """The node's link to its relay, each time it changes: the one source of the app's swarm state.

    ``connected``: ``peers`` online, this node included. ``unreachable``: ``reason`` in a few plain
    words ("connection refused") and ``retry_at``, the wall-clock time of the next try (the node
    tries at its next request after it, so at most once a round).
    """

    state: Literal["connected", "unreachable"]
    url: str
    peers: int = 0
    reason: str = ""
    retry_at: float | None = None


class SwarmManifest(Event, tag="manifest", frozen=True):
    """The swarm's manifest (wire/manifest.py) as this node met it: ``adopted`` (its mix is this node's now),
    ``changed`` (the relay announces another digest than the one this node joined with, or the one it joined signed
    comes signed by another key or unsigned: ``changes`` says what; the node keeps the one it joined with),
    ``refused`` (``reason``; the node trains alone on its own mix)."""

    state: Literal["adopted", "changed", "refused"]
    swarm: str
    digest: str = ""  # sha256 of the manifest this event is about
    mix: list[str] = []  # the tasks in short words (wire.manifest.mix_summary)
    completions: int | None = None
    max_tokens: int | None = None
    format_bonus: float | None = None
    joined_digest: str = ""  # changed: the digest this node joined with and keeps
    signer: str = ""  # the key that signed the manifest this event is about (64 hex; "" unsigned)
    joined_signer: str = ""  # changed: the signer of the one this node joined with and keeps
    replaced: list[str] = []  # adopted: keys the operator handed over from (64 hex each), refused from now on
    changes: list[str] = []
    reason: str = ""


class History(Event, tag="history", frozen=True):
    """Right after ``start``: the rounds and evaluations this node made before, from its data dir
    (``events.jsonl``, engine/run/history.py), up to the round it resumed from, oldest first. A
    restarted app rebuilds its charts, answers and cards from it. Bounded: the last rounds only,
    their ``rollouts`` only in the newest few."""

    events: list[Round | Eval] = []


MAX_ANSWER_CHARS = 2000  # an answer's text in an ``answer`` event, cut here


class Answer(Event, tag="answer", frozen=True):
    """The reply to an ``ask`` (same ``id``): the base model's answer (LoRA off) beside the trained one's,
    both greedy from llama.cpp, served at the node's next pause point.

    ``trained`` is None before the first round has trained an adapter. With a ``task``, ``question`` is the
    one drawn from it, ``expected`` its reference answer, and the scores are the task's own (0 to 1) and whether each
    answer is fully correct; a typed question has no scores. ``error``:
    why there is no answer (an unknown task, ...), one line.
    """

    id: str
    question: str = ""
    task: str = ""
    base: str = ""
    trained: str | None = None
    base_score: float | None = None  # the task's score, 0 to 1 (no format bonus)
    trained_score: float | None = None
    base_correct: bool | None = None
    trained_correct: bool | None = None
    expected: str = ""
    round: int = 0  # the trained answer's model: after this many rounds
    seconds: float = 0.0
    error: str = ""


AnyEvent = (Start | StateChanged | PhaseProgress | Download | Status | Warning | ErrorEvent | Stop | Round | Eval | Swarm
            | Relay | SwarmManifest | History | Answer)
EVENT_TYPES: tuple[type[Event], ...] = (Start, StateChanged, PhaseProgress, Download, Status, Warning, ErrorEvent,
                                        Stop, Round, Eval, Swarm, Relay, SwarmManifest, History, Answer)


# --- commands into a node --------------------------------------------------------------

class Command(msgspec.Struct, tag_field="cmd", frozen=True, forbid_unknown_fields=True):
    """Base of every command (``{"cmd": ...}``, one per line on the node's stdin)."""


class Pause(Command, tag="pause", frozen=True):
    """Pause at the next step boundary (mid-round is fine: the round resumes where it was)."""


class Resume(Command, tag="resume", frozen=True):
    pass


class Finish(Command, tag="finish", frozen=True):
    """Complete the round in flight, then pause (Folding@home's *Finish*)."""


class StopCommand(Command, tag="stop", frozen=True):
    """Stop after the round in flight, like SIGTERM."""


class SetThreads(Command, tag="set_threads", frozen=True):
    threads: int = msgspec.field(default=0)

    def __post_init__(self) -> None:
        if not 1 <= self.threads <= 1024:
            raise ValueError("threads must be 1..1024")


class SetCpuLimit(Command, tag="set_cpu_limit", frozen=True):
    """Use at most ``percent`` % of the CPU time of the cores it uses (BOINC's "use at most N % of CPU time"):
    the node sleeps at safe points between steps, from the next step on. 100 = no limit."""

    percent: int = msgspec.field(default=100)

    def __post_init__(self) -> None:
        if not 1 <= self.percent <= 100:
            raise ValueError("percent must be 1..100")



MAX_QUESTION_CHARS = 2000
MAX_ASK_TOKENS = 512


class Ask(Command, tag="ask", frozen=True):
    """Try the model: ``question`` (typed) or ``task`` (a question drawn from one of the node's tasks),
    answered by the base model and the trained one in an ``answer`` event with the same ``id``, at the
    node's next pause point (at most a round away; at once while paused). ``max_tokens`` bounds each answer."""

    id: str
    question: str = ""
    task: str = ""
    max_tokens: int = 128

    def __post_init__(self) -> None:
        if not 1 <= len(self.id) <= 64:
            raise ValueError("id must be 1..64 characters")
        if bool(self.question.strip()) == bool(self.task):
            raise ValueError("give either a question or a task")
        if len(self.question) > MAX_QUESTION_CHARS:
            raise ValueError(f"a question is at most {MAX_QUESTION_CHARS} characters")
        if not 1 <= self.max_tokens <= MAX_ASK_TOKENS:
            raise ValueError(f"max_tokens must be 1..{MAX_ASK_TOKENS}")



AnyCommand = Pause | Resume | Finish | StopCommand | SetThreads | SetCpuLimit | Ask


# --- encode / decode -------------------------------------------------------------------

_encoder = msgspec.json.Encoder()
_event_decoder = msgspec.json.Decoder(AnyEvent)
_command_decoder = msgspec.json.Decoder(AnyCommand)
_KNOWN_EVENTS = frozenset(str(t.__struct_config__.tag) for t in EVENT_TYPES)


class _Tag(msgspec.Struct):
    type: Any = None


_tag_decoder = msgspec.json.Decoder(_Tag)


def encode(item: Event | Command) -> bytes:
    """One event or command as a JSON line (newline included)."""
    return _encoder.encode(item) + b"\n"


def decode_event(line: str | bytes) -> AnyEvent | None:
    """One event from a JSON line; None for an event type this side does not know.

    Raises ``msgspec.DecodeError`` (``ValidationError`` included) for a line that is not an
    event at all: the caller decides whether that is fatal (it is not, for the GUI).
    """
    try:
        return _unnested(_event_decoder.decode, line)
    except msgspec.ValidationError:
        if _unnested(_tag_decoder.decode, line).type not in _KNOWN_EVENTS:
            return None  # a newer engine's event type: skip it
        raise


def decode_command(line: str | bytes) -> AnyCommand:
    """One command; raises ``msgspec.DecodeError`` with a readable message on a bad line."""
    return _unnested(_command_decoder.decode, line)


def _too_deep() -> msgspec.DecodeError:
    # msgspec recurses into nested arrays and objects where a field is free-form (a start event's settings):
    # a line of 100,000 "[" raised RecursionError, past every caller's `except msgspec.DecodeError`.
    return msgspec.DecodeError("JSON nested too deeply")


def _unnested(decode: Any, line: str | bytes) -> Any:
    try:
        return decode(line)
    except RecursionError:
        raise _too_deep() from None


def to_dict(event: Event) -> dict[str, Any]:
    """An event as plain builtins (its ``type`` included), e.g. for tests and tables."""
    return msgspec.to_builtins(event) | {"type": event.__struct_config__.tag}
