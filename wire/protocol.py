"""The SAPO Swarm wire protocol: every message between a node and the relay.

Defined once here and imported by both sides (``engine.sharing.swarm_client`` and ``relay.server``).
Frames are JSON text; each carries the protocol version ``v`` and a ``type`` tag.
msgspec does the decoding and the type checks at C speed; the range and size
checks it cannot express are in ``Group.__post_init__`` and friends, so a
decoded message is always a valid one. Keys, ids and display names: ``wire.identity``.

Conversation (one reply per request, in order)::

    node                                  relay
    hello {swarm, public_key, ...}       ->
                                         <- challenge {nonce}            (or error + close)
    auth {signature of the nonce}        ->
                                         <- welcome {node_id, peers, limits, manifest?, signature?}   (or error + close)
    publish {groups, signatures}         ->
                                         <- ack {accepted, rejected}
    sample {n, max_age_s, tasks}         ->
                                         <- groups {groups: [SharedGroup]}
    stats                                ->
                                         <- stats_reply {leaderboard, you, ...}
    report {round, trained, signature}   ->
                                         <- ack {accepted: groups credited}
    anything refused                     <- error {code, reason}         (maybe then a close)

Who signs what (Ed25519, ``wire.identity``; each signature is bound to its purpose and the swarm):

- ``auth``: the relay's fresh random nonce, so nobody without the private key can connect as a node
  (node ids are derived from public keys, so an id cannot be claimed with another key).
- every published group, over its canonical encoding (``group_bytes``): the signature and the
  author's public key travel with it in ``SharedGroup``, so a receiver checks authorship itself
  (``shared_group_ok``) and not even the relay can forge or alter a group.
- ``report``: the content digests of the groups the node actually trained on; only these
  count as "adopted", once per (receiver, group).
- the swarm's manifest, where the operator has a manifest key (``wire.manifest.sign_manifest``): its swarm and
  digest, so a node that pins the key knows the rules came from the operator and not from whoever runs the relay.

Connecting (``websockets`` asyncio client)::

    me = Identity.generate()
    async with connect(url, max_size=MAX_FRAME_BYTES) as ws:
        await ws.send(encode(Hello(swarm=..., public_key=me.public_key, ...)))
        challenge = decode(await ws.recv())       # Challenge, or Error then a close
        await ws.send(encode(Auth(signature=sign_challenge(me, swarm, challenge.nonce))))
        welcome = decode(await ws.recv())         # Welcome, or Error then a close
        await ws.send(encode(Sample(n=4)))
        groups = decode(await ws.recv())          # Groups

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
import re
from typing import Annotated, Any, Final

import msgspec

from wire import authorship
from wire import identity as ident
from wire.identity import Identity

# v2: signed identities (challenge at hello), signed groups and reports, no chosen names.
# v3: the welcome carries the swarm's manifest and its digest (wire/manifest.py) where the relay declares one;
#     a group names its author's stream (``Group.origin``, checked: ``authored_by``) and ``group_digest`` covers
#     its normalised content (wire/authorship.py); the welcome's manifest may come signed by the operator's key
#     (``manifest_signer``, ``manifest_signature``: wire/manifest.py), with the operator's handovers from earlier keys
#     (``manifest_handovers``). All came before v3 was released, so no v4.
PROTOCOL_VERSION = 3

# Bounds on what a peer may send. Generous for real use, tight enough that one
# hostile frame cannot cost the relay more than a few hundred KB. A relay may set
# tighter ones (``Limits`` in its welcome); these are the most any relay accepts.
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
# receivers refuse groups claiming more (engine/sharing/admission.py).
MAX_FORMAT_BONUS = 0.5
# A swarm's name: it also appears in the status page's URLs (/swarm/NAME). `\A...\Z`, not `^...$`:
# `$` would let a trailing newline through.
SWARM_NAME_PATTERN: Final = r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z"

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


class Origin(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The author's stream a group's question was drawn from: its seed is
    ``wire.authorship.stream_seed(author's node id, seed, lane, dataset, config)`` (``authored_by``)."""

    seed: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] = 0  # the author's user seed
    lane: Annotated[str, msgspec.Meta(pattern=r"\A[a-z]{1,16}\Z")] = authorship.MAIN_LANE


class Group(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One question and the L answers a node generated for it, as plain text.

    ``rewards`` are the sender's claims; a receiver never trusts them and
    re-scores every completion itself (``engine.sharing.admission``).
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
    # Optional: the sender's sampling log-prob of each token of each completion (its own tokenizer),
    # for receivers running the same model (engine/learning/offpolicy.py). UNSET is left out of the encoding,
    # so groups without it encode and sign exactly as before.
    logprobs: Annotated[
        list[Annotated[list[Annotated[float, msgspec.Meta(ge=-1000.0, le=0.0)]],
                       msgspec.Meta(max_length=MAX_COMPLETION_CHARS + 1)]],
        msgspec.Meta(max_length=MAX_COMPLETIONS),
    ] | msgspec.UnsetType = msgspec.UNSET
    # Which of its author's streams the question comes from; absent: Origin() (seed 0, the main lane).
    origin: Origin | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        if len(self.rewards) != len(self.completions):
            raise ValueError("rewards and completions differ in length")
        if self.logprobs is not msgspec.UNSET and len(self.logprobs) != len(self.completions):
            raise ValueError("logprobs and completions differ in length")

    def has_spread(self) -> bool:
        return has_spread(self.rewards)


def has_spread(rewards: list[float]) -> bool:
    """True when the rewards differ: a group without spread gives zero advantage everywhere.

    The one rule for "worth sharing" (node), "worth pooling" (relay) and "worth training" (GRPO).
    """
    return len(rewards) >= 2 and max(rewards) - min(rewards) > SPREAD_EPS


def group_bytes(group: Group) -> bytes:
    """The canonical encoding a group's signature covers (dict keys sorted, so re-encoding matches)."""
    return msgspec.json.encode(group, order="sorted")


def group_digest(group: Group) -> str:
    """A group's content id: 32 hex chars over what it teaches (``wire.authorship.normal_content``:
    its answer, or question, and its completions, with spacing, case and order made alike).

    The relay refuses a second group with the same content from anyone (a copy of another
    node's answers earns nothing); a node trains it once and names trained groups by it in ``report``.
    """
    content = msgspec.json.encode(authorship.normal_content(group.answer, group.question, group.completions))
    return hashlib.blake2b(content, digest_size=16).hexdigest()


def group_origin(group: Group) -> Origin:
    return Origin() if group.origin is msgspec.UNSET else group.origin


def authored_by(group: Group, node_id: str) -> bool:
    """True when the group's question seed is one of ``node_id``'s own streams (``wire.authorship``)."""
    o = group_origin(group)
    return group.spec.seed == authorship.stream_seed(node_id, o.seed, o.lane, group.spec.dataset, group.spec.config)


def with_author(group: Group, node_id: str) -> Group:
    """The group with its spec's seed moved into ``node_id``'s stream (its origin's): for tools and tests
    that make groups by hand. The question text is not regenerated."""
    o = group_origin(group)
    seed = authorship.stream_seed(node_id, o.seed, o.lane, group.spec.dataset, group.spec.config)
    return msgspec.structs.replace(group, spec=msgspec.structs.replace(group.spec, seed=seed))


# --- identity on the wire ---------------------------------------------------------------

NodeId = Annotated[str, msgspec.Meta(pattern=ident.NODE_ID_PATTERN)]
Digest = Annotated[str, msgspec.Meta(pattern=r"\A[0-9a-f]{32}\Z")]
PublicKey = Annotated[bytes, msgspec.Meta(min_length=ident.PUBLIC_KEY_BYTES, max_length=ident.PUBLIC_KEY_BYTES)]
Signature = Annotated[bytes, msgspec.Meta(min_length=ident.SIGNATURE_BYTES, max_length=ident.SIGNATURE_BYTES)]
Nonce = Annotated[bytes, msgspec.Meta(min_length=ident.NONCE_BYTES, max_length=ident.NONCE_BYTES)]
SwarmName = Annotated[str, msgspec.Meta(pattern=SWARM_NAME_PATTERN)]
ShortText = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Count = Annotated[int, msgspec.Meta(ge=0, lt=2**53)]
Seconds = Annotated[float, msgspec.Meta(ge=0.0, le=2.0**40)]
Reward = Annotated[float, msgspec.Meta(ge=-10.0, le=10.0)]

_SWARM_NAME_RE: Final = re.compile(SWARM_NAME_PATTERN)


def swarm_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a swarm, in one line, or None: the rule ``SwarmName`` checks on the wire."""
    if _SWARM_NAME_RE.match(name):
        return None
    return ("swarm name must be 1..64 characters: letters, digits, '.', '_' or '-', starting with a letter or digit; "
            f"got {name!r}")

# What each signature is for: a signature made for one purpose never verifies for another.
HELLO, GROUP, REPORT = b"hello", b"group", b"report"


def sign_challenge(me: Identity, swarm: str, nonce: bytes) -> bytes:
    return me.sign(HELLO, swarm.encode(), nonce)


def challenge_ok(public_key: bytes, signature: bytes, swarm: str, nonce: bytes) -> bool:
    return ident.verify(public_key, signature, HELLO, swarm.encode(), nonce)


def sign_group(me: Identity, swarm: str, group: Group) -> bytes:
    return me.sign(GROUP, swarm.encode(), group_bytes(group))


def group_signature_ok(public_key: bytes, signature: bytes, swarm: str, group: Group) -> bool:
    return ident.verify(public_key, signature, GROUP, swarm.encode(), group_bytes(group))


def sign_report(me: Identity, swarm: str, round_: int, trained: list[str]) -> bytes:
    return me.sign(REPORT, swarm.encode(), round_.to_bytes(8, "big"), ",".join(trained).encode())


def report_signature_ok(public_key: bytes, signature: bytes, swarm: str, round_: int, trained: list[str]) -> bool:
    return ident.verify(public_key, signature, REPORT, swarm.encode(), round_.to_bytes(8, "big"),
                        ",".join(trained).encode())


# --- messages -----------------------------------------------------------------------


class _Message(msgspec.Struct, tag_field="type", frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of every frame: the ``type`` tag and the protocol version ``v``.

    (Subclasses repeat ``frozen=True`` only for type checkers; msgspec inherits it.)
    """

    v: Annotated[int, msgspec.Meta(ge=0, lt=2**16)] = PROTOCOL_VERSION


class Hello(_Message, tag="hello", frozen=True):
    """node -> relay, first frame of every connection. The node id is derived from ``public_key``."""

    swarm: SwarmName
    public_key: PublicKey
    model: Name
    client_version: ShortText
    token: Annotated[str, msgspec.Meta(max_length=256)] | None = None


class Challenge(_Message, tag="challenge", frozen=True):
    """relay -> node, the reply to hello: sign this fresh nonce (``sign_challenge``)."""

    nonce: Nonce


class Auth(_Message, tag="auth", frozen=True):
    """node -> relay, the reply to challenge: proof that the node holds the hello's key."""

    signature: Signature


class Limits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What this relay accepts; a node stays within it (``engine.sharing.swarm_client`` reads it from the welcome)."""

    max_frame_bytes: Count
    max_groups_per_publish: Count
    max_sample_n: Count
    max_task_filters: Count
    max_completions: Count
    max_completion_chars: Count
    max_question_chars: Count
    groups_per_minute: Count  # published groups per author (not per connection)
    groups_per_author: Count  # kept in the pool per author; its oldest go first
    pool_max_age_s: Seconds
    rate_per_s: Seconds
    burst: Count


MAX_HANDOVERS = 4  # a chain of manifest keys, oldest first: enough for years of yearly rotations


class KeyHandover(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An operator's manifest key handing over to its successor: ``old`` signs the next key of the chain
    (``wire.manifest.sign_handover``)."""

    old: PublicKey
    signature: Signature


class Welcome(_Message, tag="welcome", frozen=True):
    """relay -> node, the reply to a good auth. ``peers`` counts this node too."""

    node_id: NodeId
    peers: Count
    limits: Limits
    server_version: ShortText
    # The swarm's manifest (``wire.manifest.Manifest`` as JSON) and the sha256 of its canonical encoding; None
    # where the relay declares none. Left as plain JSON here, so that a node checks it on its own
    # (``wire.manifest.decode_manifest``) and refuses a bad one without refusing the relay.
    manifest: dict[str, Any] | None = None
    manifest_digest: Annotated[str, msgspec.Meta(pattern=r"\A[0-9a-f]{64}\Z")] | None = None
    # Where the operator signs manifests (``sapo-relay --manifest-key``): the key's raw public key and its signature
    # of this manifest (``wire.manifest.sign_manifest``), both or neither. Checked by the node, as the manifest is.
    manifest_signer: PublicKey | None = None
    manifest_signature: Signature | None = None
    # The keys the operator signed with before ``manifest_signer``, oldest first, each handing over to the next and
    # the last to the signer (``sapo-relay handover``): a node that pins or joined with an older key follows the
    # new one, and from then on refuses the old ones (wire/manifest.py ``handover_chain``). Unset (not sent at all)
    # where there is none, so that a node built before the field was added still reads the welcome.
    manifest_handovers: (Annotated[list[KeyHandover], msgspec.Meta(max_length=MAX_HANDOVERS)]
                         | msgspec.UnsetType) = msgspec.UNSET


class Publish(_Message, tag="publish", frozen=True):
    """node -> relay: groups for others to train on; ``signatures[i]`` is ``sign_group`` of ``groups[i]``."""

    groups: Annotated[list[Group], msgspec.Meta(min_length=1, max_length=MAX_GROUPS_PER_PUBLISH)]
    signatures: Annotated[list[Signature], msgspec.Meta(min_length=1, max_length=MAX_GROUPS_PER_PUBLISH)]

    def __post_init__(self) -> None:
        if len(self.signatures) != len(self.groups):
            raise ValueError("one signature per group")


class Rejection(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    index: Count
    reason: ShortText


class Ack(_Message, tag="ack", frozen=True):
    """relay -> node, the reply to publish (and report)."""

    accepted: Count
    rejected: list[Rejection] = []


class Sample(_Message, tag="sample", frozen=True):
    """node -> relay: up to ``n`` random groups from others, fresher than ``max_age_s``.

    The relay picks an author uniformly, then one of its groups, so no author supplies more
    than its share. It never returns the node's own groups, groups without reward spread, or
    (with ``unseen_only``) a group it already sent to this node.
    """

    n: Annotated[int, msgspec.Meta(ge=1, le=MAX_SAMPLE_N)]
    max_age_s: Annotated[float, msgspec.Meta(gt=0.0, le=MAX_AGE_S)] = 600.0
    tasks: Annotated[list[Name], msgspec.Meta(min_length=1, max_length=MAX_TASK_FILTERS)] | None = None
    unseen_only: bool = True


class SharedGroup(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A group as another node receives it: its author's key and signature, and when the relay got it.

    Check it with ``shared_group_ok`` before anything else: the relay passes these on, but
    only the signature says who wrote the group.
    """

    group: Group
    node_id: NodeId
    public_key: PublicKey
    signature: Signature
    received_at: Seconds


def shared_group_ok(shared: SharedGroup, swarm: str) -> bool:
    """True when ``shared.node_id`` owns ``public_key`` and that key signed this group for this swarm."""
    return ident.node_id_for(shared.public_key) == shared.node_id and group_signature_ok(
        shared.public_key, shared.signature, swarm, shared.group
    )


class Groups(_Message, tag="groups", frozen=True):
    """relay -> node, the reply to sample (possibly empty)."""

    groups: Annotated[list[SharedGroup], msgspec.Meta(max_length=MAX_SAMPLE_N)]


class StatsRequest(_Message, tag="stats", frozen=True):
    """node -> relay: how is the swarm doing?"""


class LeaderboardRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One node's contribution. No name: whoever shows it uses ``wire.identity.display_name``."""

    node_id: NodeId
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
    """node -> relay: "I finished round ``round`` and trained on these groups" (``group_digest`` each).

    Signed (``sign_report``). Each author is credited once per (receiver, group), and only
    for groups the relay actually sent to this receiver.
    """

    round: Annotated[int, msgspec.Meta(ge=0, lt=2**31)]
    trained: Annotated[list[Digest], msgspec.Meta(max_length=MAX_SAMPLE_N)]
    signature: Signature


class Error(_Message, tag="error", frozen=True):
    """relay -> node: a refused frame. ``code`` is one of ``Code``; see CLOSE_CODES."""

    code: ShortText
    reason: Annotated[str, msgspec.Meta(max_length=512)]


ClientMessage = Hello | Auth | Publish | Sample | StatsRequest | Report
ServerMessage = Challenge | Welcome | Ack | Groups | StatsReply | Error
Message = ClientMessage | ServerMessage
CLIENT_MESSAGES: Final = (Hello, Auth, Publish, Sample, StatsRequest, Report)


# --- errors -----------------------------------------------------------------------


class Code:
    """Error codes sent in ``error`` frames."""

    MALFORMED = "malformed"  # not a JSON text frame
    INVALID = "invalid"  # JSON, but a field has the wrong type or range
    VERSION = "version"  # another protocol version
    UNEXPECTED = "unexpected"  # a valid message at the wrong time (no hello first, ...)
    TOO_BIG = "too_big"
    TIMEOUT = "timeout"  # no hello in time
    UNAUTHORIZED = "unauthorized"  # wrong token, bad signature, or a key this relay does not admit
    RATE_LIMITED = "rate_limited"
    ABUSE = "abuse"  # too many refused frames: the connection is closed
    REPLACED = "replaced"  # the same node (same key) connected again
    FULL = "full"  # the relay is at its peer or swarm limit
    UNAVAILABLE = "unavailable"  # the relay's shared state (Redis) is unreachable: try again, or another relay
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
    Code.UNAVAILABLE: 1013,  # "try again later"
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
    return ProtocolError(
        Code.VERSION, f"protocol version {v!r} is not supported: use version {PROTOCOL_VERSION} (update sapo-swarm)"
    )


def _explain(frame: Frame, code: str, reason: str) -> ProtocolError:
    """Prefer "wrong version" over "bad field" when a newer peer sends a message we don't know."""
    try:
        env = _envelope_decoder.decode(frame)
    except (msgspec.MsgspecError, RecursionError, ValueError, TypeError):
        return ProtocolError(code, reason)
    if type(env.v) is int and env.v != PROTOCOL_VERSION:
        return _version_error(env.v)
    return ProtocolError(code, reason)
