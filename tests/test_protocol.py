"""The wire protocol: encode/decode, validation on receipt, the error table, display names."""

from __future__ import annotations

import json
import re

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire import protocol as p

NODE = "0123456789abcdef0123456789abcdef"


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


def shared() -> p.SharedGroup:
    return p.SharedGroup(group=group(), node_id=NODE, name="n", received_at=12.5)


ROW = p.LeaderboardRow(NODE, "n", 1, 2, 3, 0.5, 9.0)
MESSAGES: list[p.Message] = [
    p.Hello(swarm="s", node_id=NODE, name="swift-otter-01", model="m", client_version="1", token="t"),
    p.Welcome(node_id=NODE, name="n", peers=3, limits=p.Limits(1, 2, 3, 4.0, 5.0, 6), server_version="x"),
    p.Publish(groups=[group()]),
    p.Ack(accepted=1, rejected=[p.Rejection(0, "duplicate")]),
    p.Sample(n=4, max_age_s=30.0, tasks=["basic_arithmetic"]),
    p.Groups(groups=[shared()]),
    p.StatsRequest(),
    p.StatsReply(peers_online=1, groups_per_minute=2.0, leaderboard=[ROW], you=ROW),
    p.Report(round=5),
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
    return json.dumps({"type": "publish", "v": 1, "groups": [g]})


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("", p.Code.MALFORMED),
        ("not json", p.Code.MALFORMED),
        (b"\xff\xfe", p.Code.MALFORMED),
        ("[1, 2]", p.Code.INVALID),
        ('{"type": "nope", "v": 1}', p.Code.INVALID),
        ('{"v": 1}', p.Code.INVALID),
        (_hello(v=2), p.Code.VERSION),
        (_hello(v="1"), p.Code.INVALID),
        ('{"type": "future_thing", "v": 3}', p.Code.VERSION),
        (_hello(node_id="A" * 32), p.Code.INVALID),
        (_hello(node_id="a" * 32 + "\n"), p.Code.INVALID),
        (_hello(name="evil\x1b[31m"), p.Code.INVALID),
        (_hello(swarm="has space"), p.Code.INVALID),
        (_hello(extra=1), p.Code.INVALID),
        (_hello(name="lone").replace("lone", "\\ud800"), p.Code.MALFORMED),
        (_publish_with(rewards=[1.0]), p.Code.INVALID),
        (_publish_with(rewards=[1.0, 11.0]), p.Code.INVALID),
        (_publish_with(completions=["x"]), p.Code.INVALID),
        (_publish_with(completions=["x"] * 65, rewards=[0.0] * 65), p.Code.INVALID),
        (_publish_with().replace("1.0", "1e999"), p.Code.INVALID),
        (_publish_with().replace("1.0", "NaN"), p.Code.MALFORMED),
        ('{"type": "publish", "v": 1, "groups": []}', p.Code.INVALID),
        ('{"type": "sample", "v": 1, "n": 0}', p.Code.INVALID),
        ('{"type": "sample", "v": 1, "n": 100000000000000000000000000}', p.Code.INVALID),
        ('{"type": "sample", "v": 1, "n": 1, "max_age_s": -1}', p.Code.INVALID),
        ('{"type": "report", "v": 1, "round": -1}', p.Code.INVALID),
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


def test_display_name_is_stable_and_valid() -> None:
    names = {p.display_name(p.new_node_id()) for _ in range(200)}
    assert len(names) > 190
    assert p.display_name(NODE) == p.display_name(NODE)
    for name in names:
        assert re.fullmatch(r"[a-z]+-[a-z]+-\d\d", name)
        msgspec.convert(name, p.DisplayText)
    assert re.fullmatch(r"[0-9a-f]{32}", p.new_node_id())


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
