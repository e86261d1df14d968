"""The SAPO Swarm wire protocol: every message between a node and the relay.

Defined once here and imported by both sides (``engine.swarm`` and ``relay.server``).
Frames are JSON text; each carries the protocol version ``v`` and a ``type`` tag.
msgspec does the decoding and the type checks at C speed; the range and size
checks it cannot express are in ``Group.__post_init__`` and friends, so a
decoded message is always a valid one.

Conversation (one reply per request, in order)::

    node                          relay
    hello {swarm, node_id, ...}  ->
                                 <- welcome {peers, limits}      (or error + close)
    publish {groups}             ->
                                 <- ack {accepted, rejected}
    sample {n, max_age_s, tasks} ->
                                 <- groups {groups: [SharedGroup]}
    stats                        ->
                                 <- stats_reply {leaderboard, you, ...}
    report {round}               ->
                                 <- ack {accepted: 1}
    anything refused             <- error {code, reason}         (maybe then a close)

Connecting (``websockets`` asyncio client)::

    async with connect(url, max_size=MAX_FRAME_BYTES) as ws:
        await ws.send(encode(Hello(swarm=..., node_id=..., name=display_name(node_id), ...)))
        welcome = decode(await ws.recv())          # Welcome, or Error then a close
        await ws.send(encode(Sample(n=4)))
        groups = decode(await ws.recv())           # Groups

The relay pings every 20 s and drops a peer that has not answered for 20 s more,
so keep the client's event loop running (or reconnect per round).

Errors (one hierarchy)::

    Exception
     +-- ProtocolError(code, reason)   a frame we refuse; ``close_code`` maps it to
                                       the websocket close code (CLOSE_CODES table)

On the wire, a clean close (1000, 1001) reads as ``websockets``' ConnectionClosedOK
and every other code as ConnectionClosedError; 1011 reasons never carry details.

This module does no I/O.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Annotated, Any, Final

import msgspec

PROTOCOL_VERSION = 1

# Bounds on what a peer may send. Generous for real use, tight enough that one
# hostile frame cannot cost the relay more than a few hundred KB.
MAX_FRAME_BYTES = 1 << 20
MAX_COMPLETIONS = 64
MAX_COMPLETION_CHARS = 16_384
MAX_QUESTION_CHARS = 16_384
MAX_NAME_CHARS = 128
MAX_CONFIG_ITEMS = 32
MAX_GROUPS_PER_PUBLISH = 32
MAX_SAMPLE_N = 64
MAX_TASK_FILTERS = 32
MAX_AGE_S = 7 * 24 * 3600.0
# A shared group must leave room for a few others in one `groups` reply.
MAX_SHARED_GROUP_BYTES = MAX_FRAME_BYTES // 4
LEADERBOARD_ROWS = 20
SPREAD_EPS = 1e-6  # rewards closer than this count as equal
# A claimed reward is task score + a format bonus in [0, MAX_FORMAT_BONUS] for well-formed answers;
# receivers refuse groups claiming more (engine/verify.py).
MAX_FORMAT_BONUS = 0.5

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS)]
ConfigValue = int | float | str | bool | list[int | float | str | bool] | None


class TaskSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Everything reasoning-gym needs to regenerate one question and its answer.

    ``reasoning_gym.create_dataset(dataset, seed=seed, size=index + 1, **config)[index]``
    """

    dataset: Name
    config: dict[str, ConfigValue]
    seed: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]  # int64: msgspec bounds must fit
    index: Annotated[int, msgspec.Meta(ge=0, lt=2**31)]

    def __post_init__(self) -> None:
        if len(self.config) > MAX_CONFIG_ITEMS:
            raise ValueError(f"config has more than {MAX_CONFIG_ITEMS} items")

    def key(self) -> str:
        """A stable string identity, e.g. for dedup and logs."""
        return msgspec.json.encode(self, order="sorted").decode()


class Group(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One question and the L answers a node generated for it, as plain text.

    ``rewards`` are the sender's claims; a receiver never trusts them and
    re-scores every completion itself (``engine.verify``).
    """

    spec: TaskSpec
    question: Annotated[str, msgspec.Meta(max_length=MAX_QUESTION_CHARS)]
    answer: Annotated[str, msgspec.Meta(max_length=MAX_QUESTION_CHARS)]
    completions: Annotated[
        list[Annotated[str, msgspec.Meta(max_length=MAX_COMPLETION_CHARS)]],
        msgspec.Meta(min_length=2, max_length=MAX_COMPLETIONS),
    ]
    rewards: list[Annotated[float, msgspec.Meta(ge=-10.0, le=10.0)]]
    model: Name
    round: Annotated[int, msgspec.Meta(ge=0, lt=2**31)] = 0

    def __post_init__(self) -> None:
        if len(self.rewards) != len(self.completions):
            raise ValueError("rewards and completions differ in length")

    def has_spread(self) -> bool:
        return has_spread(self.rewards)


def has_spread(rewards: list[float]) -> bool:
    """True when the rewards differ: a group without spread gives zero advantage everywhere.

    The one rule for "worth sharing" (node), "worth pooling" (relay) and "worth training" (GRPO).
    """
    return len(rewards) >= 2 and max(rewards) - min(rewards) > SPREAD_EPS


# --- identity ---------------------------------------------------------------------

# `\A...\Z`, not `^...$`: `$` would let a trailing newline through.
NodeId = Annotated[str, msgspec.Meta(pattern=r"\A[0-9a-f]{32}\Z")]
SwarmName = Annotated[str, msgspec.Meta(pattern=r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")]
# Shown to other people: printable, no control characters (no terminal tricks).
DisplayText = Annotated[str, msgspec.Meta(pattern=r"\A[^\x00-\x1f\x7f-\x9f]{1,64}\Z")]
ShortText = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Count = Annotated[int, msgspec.Meta(ge=0, lt=2**53)]
Seconds = Annotated[float, msgspec.Meta(ge=0.0, le=2.0**40)]
Reward = Annotated[float, msgspec.Meta(ge=-10.0, le=10.0)]

_ADJECTIVES: Final = tuple(
    """
    amber bold brave bright brisk calm clever cosmic crisp curious daring dusty eager early fancy
    fierce gentle giant golden grand happy hidden humble icy jolly keen kind lively lucky mellow
    mighty misty modest noble nimble odd patient plucky polite proud quick quiet rapid rare rosy
    rustic shiny silent silver sleepy sly smooth snowy solar spry steady stormy sunny swift tidy
    vivid wandering wild witty
    """.split()
)
_ANIMALS: Final = tuple(
    """
    albatross badger bat bear beaver bison camel cheetah cobra crane crow deer dingo dolphin eagle
    eel falcon ferret finch fox gazelle gecko gibbon goose hare hawk heron hippo ibis jackal jaguar
    koala lemur leopard lion llama lynx magpie marmot mole moose newt octopus okapi orca otter owl
    panda panther parrot pelican penguin puffin quail raven salmon seal shark sloth swan tapir tiger
    walrus wombat
    """.split()
)


def new_node_id() -> str:
    """A fresh random node id (32 hex chars); a node keeps it for life."""
    return secrets.token_hex(16)


def display_name(node_id: str) -> str:
    """A stable human name for a node id, e.g. ``"swift-otter-42"``; both sides compute the same."""
    h = int.from_bytes(hashlib.blake2b(node_id.encode(), digest_size=8).digest(), "big")
    adjective = _ADJECTIVES[h % len(_ADJECTIVES)]
    animal = _ANIMALS[(h >> 16) % len(_ANIMALS)]
    return f"{adjective}-{animal}-{(h >> 32) % 100:02d}"


# --- messages -----------------------------------------------------------------------


class _Message(msgspec.Struct, tag_field="type", frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of every frame: the ``type`` tag and the protocol version ``v`` (1 when absent).

    (Subclasses repeat ``frozen=True`` only for type checkers; msgspec inherits it.)
    """

    v: Annotated[int, msgspec.Meta(ge=0, lt=2**16)] = PROTOCOL_VERSION


class Hello(_Message, tag="hello", frozen=True):
    """node -> relay, first frame of every connection."""

    swarm: SwarmName
    node_id: NodeId
    name: DisplayText
    model: Name
    client_version: ShortText
    token: Annotated[str, msgspec.Meta(max_length=256)] | None = None


class Limits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What this relay accepts; a node should stay within it."""

    max_frame_bytes: Count
    max_groups_per_publish: Count
    max_sample_n: Count
    pool_max_age_s: Seconds
    rate_per_s: Seconds
    burst: Count


class Welcome(_Message, tag="welcome", frozen=True):
    """relay -> node, the reply to hello. ``peers`` counts this node too."""

    node_id: NodeId
    name: DisplayText
    peers: Count
    limits: Limits
    server_version: ShortText


class Publish(_Message, tag="publish", frozen=True):
    """node -> relay: groups for others to train on."""

    groups: Annotated[list[Group], msgspec.Meta(min_length=1, max_length=MAX_GROUPS_PER_PUBLISH)]


class Rejection(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    index: Count
    reason: ShortText


class Ack(_Message, tag="ack", frozen=True):
    """relay -> node, the reply to publish (and report)."""

    accepted: Count
    rejected: list[Rejection] = []


class Sample(_Message, tag="sample", frozen=True):
    """node -> relay: up to ``n`` random groups from others, fresher than ``max_age_s``.

    The relay never returns the node's own groups, groups without reward spread, or
    (with ``unseen_only``) a group it already sent to this node.
    """

    n: Annotated[int, msgspec.Meta(ge=1, le=MAX_SAMPLE_N)]
    max_age_s: Annotated[float, msgspec.Meta(gt=0.0, le=MAX_AGE_S)] = 600.0
    tasks: Annotated[list[Name], msgspec.Meta(min_length=1, max_length=MAX_TASK_FILTERS)] | None = None
    unseen_only: bool = True


class SharedGroup(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A group as another node receives it: who sent it, and when the relay got it."""

    group: Group
    node_id: NodeId
    name: DisplayText
    received_at: Seconds


class Groups(_Message, tag="groups", frozen=True):
    """relay -> node, the reply to sample (possibly empty)."""

    groups: Annotated[list[SharedGroup], msgspec.Meta(max_length=MAX_SAMPLE_N)]


class StatsRequest(_Message, tag="stats", frozen=True):
    """node -> relay: how is the swarm doing?"""


class LeaderboardRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    node_id: NodeId
    name: DisplayText
    groups_shared: Count
    groups_adopted: Count
    rounds: Count
    mean_reward: Reward
    last_seen: Seconds


class StatsReply(_Message, tag="stats_reply", frozen=True):
    """relay -> node. ``leaderboard`` is sorted by groups adopted by others, then shared."""

    peers_online: Count
    groups_per_minute: Annotated[float, msgspec.Meta(ge=0.0)]
    leaderboard: Annotated[list[LeaderboardRow], msgspec.Meta(max_length=LEADERBOARD_ROWS)]
    you: LeaderboardRow


class Report(_Message, tag="report", frozen=True):
    """node -> relay: "I finished round ``round``" (counts toward its distinct rounds)."""

    round: Annotated[int, msgspec.Meta(ge=0, lt=2**31)]


class Error(_Message, tag="error", frozen=True):
    """relay -> node: a refused frame. ``code`` is one of ``Code``; see CLOSE_CODES."""

    code: ShortText
    reason: Annotated[str, msgspec.Meta(max_length=512)]


ClientMessage = Hello | Publish | Sample | StatsRequest | Report
ServerMessage = Welcome | Ack | Groups | StatsReply | Error
Message = ClientMessage | ServerMessage
CLIENT_MESSAGES: Final = (Hello, Publish, Sample, StatsRequest, Report)


# --- errors -----------------------------------------------------------------------


class Code:
    """Error codes sent in ``error`` frames."""

    MALFORMED = "malformed"  # not a JSON text frame
    INVALID = "invalid"  # JSON, but a field has the wrong type or range
    VERSION = "version"  # another protocol version
    UNEXPECTED = "unexpected"  # a valid message at the wrong time (no hello first, ...)
    TOO_BIG = "too_big"
    TIMEOUT = "timeout"  # no hello in time
    UNAUTHORIZED = "unauthorized"  # missing or wrong token
    RATE_LIMITED = "rate_limited"
    ABUSE = "abuse"  # too many refused frames: the connection is closed
    REPLACED = "replaced"  # the same node id connected again
    FULL = "full"  # the relay is at its peer or swarm limit
    INTERNAL = "internal"


# The one table from error to websocket close code.
CLOSE_CODES: Final[dict[str, int]] = {
    Code.MALFORMED: 1007,
    Code.INVALID: 1007,
    Code.VERSION: 1002,
    Code.UNEXPECTED: 1002,
    Code.TOO_BIG: 1009,
    Code.TIMEOUT: 1008,
    Code.UNAUTHORIZED: 1008,
    Code.RATE_LIMITED: 1008,
    Code.ABUSE: 1008,
    Code.REPLACED: 1008,
    Code.FULL: 1013,
    Code.INTERNAL: 1011,
}


class ProtocolError(Exception):
    """A frame or request the relay refuses; ``reason`` is safe to show the peer."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason[:200]

    @property
    def close_code(self) -> int:
        return CLOSE_CODES.get(self.code, 1011)

    @property
    def close_reason(self) -> str:
        """A close-frame reason: at most 123 bytes, and nothing internal for 1011."""
        if self.close_code == 1011:
            return "internal error"
        return self.reason.encode()[:120].decode(errors="ignore")

    def to_message(self) -> Error:
        return Error(code=self.code, reason=self.reason)


# --- encode / decode --------------------------------------------------------------


class _Envelope(msgspec.Struct):
    """Only what identifies a frame, read leniently to explain why a frame failed."""

    v: Any = None
    type: Any = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Message)
_envelope_decoder = msgspec.json.Decoder(_Envelope)
Frame = str | bytes | bytearray | memoryview


def encode(msg: Message) -> str:
    """One message as a JSON text frame."""
    return _encoder.encode(msg).decode()


def encode_bytes(msg: Message | SharedGroup) -> bytes:
    """As ``encode``, as UTF-8 bytes (send with ``text=True``): no extra copy on hot paths."""
    return _encoder.encode(msg)


def encode_groups(shared: list[bytes]) -> bytes:
    """A ``groups`` reply from already-encoded SharedGroups (the relay keeps them encoded)."""
    return b'{"type":"groups","groups":[' + b",".join(shared) + b'],"v":%d}' % PROTOCOL_VERSION


def _frame_size(frame: Frame) -> int:
    if isinstance(frame, str):
        # chars <= UTF-8 bytes <= 4 * chars: only encode when it could matter.
        if len(frame) > MAX_FRAME_BYTES or 4 * len(frame) <= MAX_FRAME_BYTES:
            return len(frame)
        return len(frame.encode(errors="surrogatepass"))
    return memoryview(frame).nbytes


def decode(frame: Frame) -> Message:
    """Parse and validate one frame; raise ProtocolError (and nothing else) if it is refused."""
    if not isinstance(frame, (str, bytes, bytearray, memoryview)):
        raise ProtocolError(Code.MALFORMED, "a frame is JSON text")
    if _frame_size(frame) > MAX_FRAME_BYTES:
        raise ProtocolError(Code.TOO_BIG, f"frame over {MAX_FRAME_BYTES} bytes")
    try:
        msg = _decoder.decode(frame)
    except msgspec.ValidationError as exc:
        raise _explain(frame, Code.INVALID, str(exc)) from None
    except (msgspec.MsgspecError, RecursionError, ValueError, TypeError) as exc:
        raise _explain(frame, Code.MALFORMED, f"not valid JSON ({exc})") from None
    if msg.v != PROTOCOL_VERSION:
        raise _version_error(msg.v)
    return msg


def _version_error(v: object) -> ProtocolError:
    return ProtocolError(Code.VERSION, f"protocol version {v!r} is not supported (this side speaks {PROTOCOL_VERSION})")


def _explain(frame: Frame, code: str, reason: str) -> ProtocolError:
    """Prefer "wrong version" over "bad field" when a newer peer sends a message we don't know."""
    try:
        env = _envelope_decoder.decode(frame)
    except (msgspec.MsgspecError, RecursionError, ValueError, TypeError):
        return ProtocolError(code, reason)
    if type(env.v) is int and env.v != PROTOCOL_VERSION:
        return _version_error(env.v)
    return ProtocolError(code, reason)
