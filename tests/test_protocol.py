"""The wire protocol: encode/decode, validation on receipt, the error table, signatures, ids, display names."""

from __future__ import annotations

import json
import re

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire import identity as ident
from wire import protocol as p
from wire.identity import Identity

ME = Identity.from_seed(bytes(range(32)))
NODE = ME.node_id
SIG = bytes(64)


def group(**over: object) -> p.Group:
    fields: dict[str, object] = dict(
        spec=p.TaskSpec("basic_arithmetic", {"min_digits": 2}, 7, 3),
        question="1+1?",
        answer="2",
        completions=["2", "3"],
        rewards=[1.0, 0.0],
        model="m",
        round=4,
    )
    fields.update(over)
    return p.Group(**fields)  # type: ignore[arg-type]


def shared(swarm: str = "s", g: p.Group | None = None) -> p.SharedGroup:
    g = g or group()
    return p.SharedGroup(group=g, node_id=NODE, public_key=ME.public_key, signature=p.sign_group(ME, swarm, g),
                         received_at=12.5)


ROW = p.LeaderboardRow(NODE, 1, 2, 3, 0.5, 9.0)
LIMITS = p.Limits(1, 2, 3, 4, 5, 6, 7, 8, 9, 10.0, 11.0, 12)
MESSAGES: list[p.Message] = [
    p.Hello(swarm="s", public_key=ME.public_key, model="m", client_version="1", token="t"),
    p.Challenge(nonce=bytes(32)),
    p.Auth(signature=SIG),
    p.Welcome(node_id=NODE, peers=3, limits=LIMITS, server_version="x"),
    p.Welcome(node_id=NODE, peers=3, limits=LIMITS, server_version="x", manifest={"swarm": "s"},
              manifest_digest="ab" * 32, manifest_signer=ME.public_key, manifest_signature=SIG),
    p.Publish(groups=[group()], signatures=[SIG]),
    p.Ack(accepted=1, rejected=[p.Rejection(0, "duplicate")]),
    p.Sample(n=4, max_age_s=30.0, tasks=["basic_arithmetic"]),
    p.Groups(groups=[shared()]),
    p.StatsRequest(),
    p.StatsReply(peers_online=1, groups_per_minute=2.0, leaderboard=[ROW], you=ROW),
    p.Report(round=5, trained=["ab" * 16], signature=SIG),
    p.Error(code=p.Code.INVALID, reason="why"),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(msg: p.Message) -> None:
    frame = p.encode(msg)
    assert isinstance(frame, str)
    assert json.loads(frame)["v"] == p.PROTOCOL_VERSION
    assert p.decode(frame) == msg
    assert p.decode(p.encode_bytes(msg)) == msg


def test_encode_groups_matches_msgspec() -> None:
    items = [shared(), shared()]
    raw = p.encode_groups([p.encode_bytes(s) for s in items])
    assert raw == p.encode_bytes(p.Groups(groups=items))
    assert p.encode_groups([]) == p.encode_bytes(p.Groups(groups=[]))


def _hello(**over: object) -> str:
    base = msgspec.to_builtins(MESSAGES[0])
    base.update(over)
    return json.dumps(base)


def _publish_with(**over: object) -> str:
    g = msgspec.to_builtins(group())
    g.update(over)
    return json.dumps({"type": "publish", "v": 3, "groups": [g], "signatures": [B64SIG]})


B64SIG = msgspec.to_builtins(SIG)
V1_HELLO = json.dumps({"type": "hello", "v": 1, "swarm": "s", "node_id": "a" * 32, "name": "x", "model": "m",
                       "client_version": "sapo-engine/0.1"})


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("", p.Code.MALFORMED),
        ("not json", p.Code.MALFORMED),
        (b"\xff\xfe", p.Code.MALFORMED),
        ("[1, 2]", p.Code.INVALID),
        ('{"type": "nope", "v": 3}', p.Code.INVALID),
        ('{"v": 3}', p.Code.INVALID),
        (V1_HELLO, p.Code.VERSION),  # an old client: told which version to use
        (_hello(v=1), p.Code.VERSION),
        (_hello(v="2"), p.Code.INVALID),
        ('{"type": "future_thing", "v": 4}', p.Code.VERSION),
        (_hello(public_key="A" * 43), p.Code.INVALID),  # not base64 of 32 bytes
        (_hello(public_key=msgspec.to_builtins(bytes(33))), p.Code.INVALID),
        (_hello(public_key="!" * 44), p.Code.INVALID),
        (_hello(node_id="a" * 32), p.Code.INVALID),  # ids are derived, never sent
        (_hello(name="evil\x1b[31m"), p.Code.INVALID),  # names are derived, never sent
        (_hello(swarm="has space"), p.Code.INVALID),
        (_hello(extra=1), p.Code.INVALID),
        (_hello(model="lone").replace("lone", "\\ud800"), p.Code.MALFORMED),
        ('{"type": "auth", "v": 3, "signature": "' + msgspec.to_builtins(bytes(63)) + '"}', p.Code.INVALID),
        ('{"type": "publish", "v": 3, "groups": [' + json.dumps(msgspec.to_builtins(group())) + '], "signatures": []}',
         p.Code.INVALID),
        ('{"type": "report", "v": 3, "round": 1, "trained": ["zz"], "signature": "' + B64SIG + '"}', p.Code.INVALID),
        ('{"type": "report", "v": 3, "round": 1, "trained": []}', p.Code.INVALID),
        (_publish_with(rewards=[1.0]), p.Code.INVALID),
        (_publish_with(rewards=[1.0, 11.0]), p.Code.INVALID),
        (_publish_with(completions=["x"]), p.Code.INVALID),
        (_publish_with(completions=["x"] * 65, rewards=[0.0] * 65), p.Code.INVALID),
        (_publish_with().replace("1.0", "1e999"), p.Code.INVALID),
        (_publish_with().replace("1.0", "NaN"), p.Code.MALFORMED),
        ('{"type": "publish", "v": 3, "groups": [], "signatures": []}', p.Code.INVALID),
        ('{"type": "sample", "v": 3, "n": 0}', p.Code.INVALID),
        ('{"type": "sample", "v": 3, "n": 100000000000000000000000000}', p.Code.INVALID),
        ('{"type": "sample", "v": 3, "n": 1, "max_age_s": -1}', p.Code.INVALID),
        ('{"type": "report", "v": 3, "round": -1, "trained": [], "signature": "' + B64SIG + '"}', p.Code.INVALID),
        ('{"x": ' + "[" * 100_000, p.Code.MALFORMED),
        ("[" * 100_000, p.Code.INVALID),
        ('"' + "x" * (p.MAX_FRAME_BYTES + 1) + '"', p.Code.TOO_BIG),
    ],
)
def test_decode_refuses(frame: str | bytes, code: str) -> None:
    with pytest.raises(p.ProtocolError) as info:
        p.decode(frame)
    assert info.value.code == code
    assert len(info.value.reason) <= 200


def test_every_code_has_a_close_code() -> None:
    codes = [v for k, v in vars(p.Code).items() if k.isupper()]
    assert sorted(codes) == sorted(p.CLOSE_CODES)
    assert {p.CLOSE_CODES[c] for c in codes} <= {1002, 1007, 1008, 1009, 1011, 1013}


def test_internal_errors_say_nothing_inside() -> None:
    err = p.ProtocolError(p.Code.INTERNAL, "KeyError at /secret/path.py:12")
    assert err.close_code == 1011
    assert err.close_reason == "internal error"
    long = p.ProtocolError(p.Code.INVALID, "é" * 500)
    assert len(long.close_reason.encode()) <= 123


def test_version_error_says_which_version_to_use() -> None:
    with pytest.raises(p.ProtocolError) as info:
        p.decode(V1_HELLO)
    assert info.value.code == p.Code.VERSION
    assert f"use version {p.PROTOCOL_VERSION}" in info.value.reason


def test_display_name_is_stable_and_valid() -> None:
    ids = {Identity.generate().node_id for _ in range(200)}
    names = {ident.display_name(i) for i in ids}
    assert len(names) > 190
    assert ident.display_name(NODE) == ident.display_name(NODE)
    for name in names:
        assert re.fullmatch(r"[a-z]+-[a-z]+-\d\d", name)
    for node_id in ids:
        assert re.fullmatch(r"[0-9a-f]{32}", node_id) and ident.is_node_id(node_id)
        msgspec.convert(node_id, p.NodeId)


def test_node_id_is_derived_from_the_public_key() -> None:
    assert ME.node_id == ident.node_id_for(ME.public_key)
    assert Identity.from_seed(bytes(range(32))).node_id == NODE  # same key, same id
    assert Identity.from_pem(ME.to_pem()).node_id == NODE
    assert Identity.generate().node_id != NODE
    assert not ident.is_node_id(NODE.upper()) and not ident.is_node_id(NODE + "\n") and not ident.is_node_id(7)
    assert "PRIVATE" not in repr(ME) and NODE in repr(ME)
    with pytest.raises(ValueError):
        Identity.from_pem(b"-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")


def test_signatures_bind_key_purpose_swarm_and_content() -> None:
    other = Identity.generate()
    g = group()
    sig = p.sign_group(ME, "s", g)
    assert p.group_signature_ok(ME.public_key, sig, "s", g)
    assert not p.group_signature_ok(other.public_key, sig, "s", g)  # another key
    assert not p.group_signature_ok(ME.public_key, sig, "t", g)  # another swarm
    assert not p.group_signature_ok(ME.public_key, sig, "s", group(rewards=[0.0, 1.0]))  # altered
    assert not p.group_signature_ok(ME.public_key, sig, "s", group(completions=["2", "4"]))
    assert not p.group_signature_ok(ME.public_key, bytes(64), "s", g)
    assert not p.group_signature_ok(ME.public_key[:31], sig, "s", g)
    # A signature made for one purpose never verifies for another.
    nonce = bytes(32)
    hello_sig = p.sign_challenge(ME, "s", nonce)
    assert p.challenge_ok(ME.public_key, hello_sig, "s", nonce)
    assert not p.challenge_ok(ME.public_key, hello_sig, "s", bytes([1]) + nonce[1:])
    assert not p.challenge_ok(ME.public_key, hello_sig, "t", nonce)
    assert not p.report_signature_ok(ME.public_key, hello_sig, "s", 0, [])
    report_sig = p.sign_report(ME, "s", 3, ["ab" * 16])
    assert p.report_signature_ok(ME.public_key, report_sig, "s", 3, ["ab" * 16])
    assert not p.report_signature_ok(ME.public_key, report_sig, "s", 4, ["ab" * 16])
    assert not p.report_signature_ok(ME.public_key, report_sig, "s", 3, [])


def test_shared_group_check_survives_the_wire() -> None:
    # Signed over the canonical encoding: decoding and re-encoding (by the relay, by the
    # receiver) must not break it, whatever the dict order or the floats.
    g = group(spec=p.TaskSpec("basic_arithmetic", {"z": 1, "a": [1.5, "x"], "m": None}, 7, 3),
              rewards=[0.1, -0.0], completions=["é\u2028\x00", "\U0001f600"])
    s = shared("s", g)
    wire = p.decode(p.encode(p.Groups(groups=[s])))
    assert isinstance(wire, p.Groups)
    assert p.shared_group_ok(wire.groups[0], "s")
    assert not p.shared_group_ok(wire.groups[0], "other-swarm")
    reordered = json.loads(p.encode(p.Groups(groups=[s])))
    spec = reordered["groups"][0]["group"]["spec"]
    spec["config"] = dict(reversed(list(spec["config"].items())))
    again = p.decode(json.dumps(reordered))
    assert isinstance(again, p.Groups) and p.shared_group_ok(again.groups[0], "s")
    # Someone else's id with my key, or my id with someone else's key: refused.
    impostor = Identity.generate()
    assert not p.shared_group_ok(msgspec.structs.replace(s, node_id=impostor.node_id), "s")
    assert not p.shared_group_ok(msgspec.structs.replace(s, public_key=impostor.public_key), "s")
    forged = msgspec.structs.replace(s, group=group(answer="3"))
    assert not p.shared_group_ok(forged, "s")


def test_group_digest_is_what_a_group_teaches() -> None:
    a = group()
    assert p.group_digest(a) == p.group_digest(group(rewards=[0.0, 1.0], round=9, model="other"))
    # Trivial changes are the same work: spacing, case, completion order, another question with the same answer.
    assert p.group_digest(a) == p.group_digest(group(completions=[" 3\n", "2 "]))
    assert p.group_digest(group(completions=["So  it is\tTWO", "x"])) == p.group_digest(
        group(completions=["x", "so it is two"]))
    assert p.group_digest(a) == p.group_digest(group(question="1+2?"))
    # Other work is not: another answer, another completion; without an answer the question decides.
    assert p.group_digest(a) != p.group_digest(group(answer="3"))
    assert p.group_digest(a) != p.group_digest(group(completions=["2", "4"]))
    assert p.group_digest(group(answer="")) != p.group_digest(group(answer="", question="1+2?"))
    assert re.fullmatch(r"[0-9a-f]{32}", p.group_digest(a))


def test_a_group_is_authored_only_by_the_node_whose_stream_drew_it() -> None:
    a, b = Identity.from_seed(b"a" * 32).node_id, Identity.from_seed(b"b" * 32).node_id
    mine = p.with_author(group(), a)
    assert p.authored_by(mine, a) and not p.authored_by(mine, b)
    assert p.authored_by(p.with_author(mine, b), b)
    # The origin names the stream: the user's seed and the lane; claiming another breaks the binding.
    other = msgspec.structs.replace(group(), origin=p.Origin(seed=5, lane="extra"))
    assert p.authored_by(p.with_author(other, a), a)
    assert not p.authored_by(msgspec.structs.replace(p.with_author(other, a), origin=p.Origin(seed=5)), a)


def test_group_has_spread() -> None:
    assert group(rewards=[0.0, 1.0]).has_spread()
    assert not group(rewards=[0.5, 0.5]).has_spread()


# --- property: decode raises ProtocolError, and nothing else ------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=20,
)
valid_dicts = st.sampled_from([msgspec.to_builtins(m) for m in MESSAGES])


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A valid message with one field replaced, added or removed."""
    msg = dict(draw(valid_dicts))
    key = draw(st.sampled_from(sorted(msg)) | st.text(max_size=8))
    if draw(st.booleans()) and key in msg:
        del msg[key]
    else:
        msg[key] = draw(json_values)
    return json.dumps(msg, allow_nan=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300) | st.text(max_size=300) | json_values.map(json.dumps) | mutated())
def test_decode_only_raises_protocol_error(frame: str | bytes) -> None:
    try:
        msg = p.decode(frame)
    except p.ProtocolError as err:
        assert err.code in p.CLOSE_CODES
    else:
        assert msg.v == p.PROTOCOL_VERSION


# --- the swarm-name rule, written once (SWARM_NAME_PATTERN) ----------------------------------

@pytest.mark.parametrize("name", ["s", "public", "A.b_c-9", "0", "x" * 64])
def test_good_swarm_names(name: str) -> None:
    assert p.swarm_name_problem(name) is None
    p.decode(_hello(swarm=name))  # and the wire takes it


@pytest.mark.parametrize("name", ["", "x" * 65, "has space", "-lead", ".lead", "_lead", "tail\n", "ünï", "a/b", "a:b"])
def test_bad_swarm_names(name: str) -> None:
    problem = p.swarm_name_problem(name)
    assert problem is not None and "\n" not in problem and repr(name) in problem
    with pytest.raises(p.ProtocolError):
        p.decode(_hello(swarm=name))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=70) | st.from_regex(p.SWARM_NAME_PATTERN, fullmatch=True))
def test_swarm_name_problem_is_the_wires_rule(name: str) -> None:
    """What swarm_name_problem accepts is exactly what a SwarmName field decodes."""
    try:
        msgspec.convert(name, p.SwarmName)
        wire_ok = True
    except msgspec.ValidationError:
        wire_ok = False
    assert (p.swarm_name_problem(name) is None) == wire_ok
