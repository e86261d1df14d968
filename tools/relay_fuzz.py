"""Fuzzer: hostile frames at a live relay while a well-behaved node keeps working.

    python -m tools.relay_fuzz --frames 10000

Spawns a relay (message and publish rate limits lifted so frames reach the decoder; the
refused-frame limit stays on, so hostile connections do get closed), then sends
``--frames`` malformed or hostile frames over several connections, reconnecting
whenever the relay closes one. Meanwhile two good nodes publish and sample, and
every one of their requests must be answered correctly within a deadline.
Exits non-zero if the relay dies, a handler crashes, or a good request fails.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import math
import random
import shlex
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from tools.relay_loadgen import SimNode, http_get, spawn_relay, synthetic_group
from wire import protocol as p
from wire.identity import Identity

Frame = tuple[str | bytes, bool]  # payload, sent as text?
V = p.PROTOCOL_VERSION
JUNK = "\u202e\u200b\u0000\u0007\x1b[31m\ufeff\U0001f600\u0301\ud7ff\uffff\u00ad"


def _rand_text(rng: random.Random, n: int) -> str:
    pool = JUNK + 'abc{}[]":,\\ 0123456789e.-+'
    return "".join(rng.choice(pool) if rng.random() < 0.8 else chr(rng.randrange(0x20, 0xD7FF)) for _ in range(n))


def _rand_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 1, 2**31, 2**63, 2**64 + 1, -(2**70), 10**40, rng.randrange(-1000, 1000)])
    if kind == 3:
        return rng.choice([0.5, -0.0, 1e308, -1e308, 1e-320, math.inf, -math.inf, math.nan, 10.000001])
    if kind in (4, 5):
        return _rand_text(rng, rng.randrange(0, 80))
    if kind in (6, 7):
        return [_rand_json(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    return {_rand_text(rng, rng.randrange(0, 8)): _rand_json(rng, depth + 1) for _ in range(rng.randrange(0, 5))}


def _valid_messages(rng: random.Random) -> list[dict[str, Any]]:
    me = Identity.from_seed(rng.randbytes(32))
    group = synthetic_group(rng, completions=3, chars=40)
    msgs: list[p.Message] = [
        p.Hello(swarm="fuzz", public_key=me.public_key, model="fuzzer", client_version="1", token="t"),
        p.Publish(groups=[group], signatures=[p.sign_group(me, "fuzz", group)]),
        p.Sample(n=3, tasks=["basic_arithmetic"]),
        p.StatsRequest(),
        p.Report(round=3, trained=[p.group_digest(group)], signature=p.sign_report(me, "fuzz", 3, [])),
        p.Auth(signature=rng.randbytes(64)),
    ]
    return [msgspec.to_builtins(m) for m in msgs]


def _mutate(obj: Any, rng: random.Random) -> Any:
    """Replace (or delete, or add) one thing at a random place in a JSON value."""
    if isinstance(obj, dict) and obj and rng.random() < 0.75:
        key = rng.choice(list(obj))
        out = dict(obj)
        roll = rng.random()
        if roll < 0.15:
            del out[key]
        elif roll < 0.25:
            out[_rand_text(rng, 6)] = _rand_json(rng)
        else:
            out[key] = _mutate(obj[key], rng)
        return out
    if isinstance(obj, list) and obj and rng.random() < 0.75:
        out_list = list(obj)
        i = rng.randrange(len(out_list))
        if rng.random() < 0.2:
            out_list.append(_rand_json(rng))
        else:
            out_list[i] = _mutate(out_list[i], rng)
        return out_list
    return _rand_json(rng)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, allow_nan=True)  # NaN / Infinity literals are part of the attack


def _set(msg: dict[str, Any], **fields: Any) -> str:
    return _dumps({**msg, **fields})


def _group_with(rng: random.Random, **fields: Any) -> str:
    group = msgspec.to_builtins(synthetic_group(rng, completions=3, chars=20))
    signature = base64.b64encode(rng.randbytes(64)).decode()
    return _dumps({"type": "publish", "v": V, "groups": [{**group, **fields}], "signatures": [signature]})


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


CATEGORIES: dict[str, Callable[[random.Random, list[dict[str, Any]]], Frame]] = {
    "garbage_binary": lambda rng, _: (rng.randbytes(rng.randrange(1, 2048)), False),
    "binary_json": lambda rng, v: (_dumps(rng.choice(v)).encode(), False),
    "garbage_text": lambda rng, _: (_rand_text(rng, rng.randrange(0, 400)), True),
    "invalid_utf8": lambda rng, _: (b'{"type":"stats","v":3,"x":"\xff\xfe\xc0"}', True),
    "random_json": lambda rng, _: (_dumps(_rand_json(rng)), True),
    "mutated_message": lambda rng, v: (_dumps(_mutate(rng.choice(v), rng)), True),
    "deep_nesting": lambda rng, _: (
        rng.choice(["[", '{"a":', '{"type":"stats","v":3,"x":[']) * rng.randrange(1000, 200_000),
        True,
    ),
    "huge_numbers": lambda rng, v: (
        _set(v[2], n=rng.choice([10**400, 2**64, -1, 0, 65])).replace("65", rng.choice(["1e999", "65", "-1e999"])),
        True,
    ),
    "nan_rewards": lambda rng, _: (
        _group_with(rng, rewards=[rng.choice([math.nan, math.inf, -math.inf, 1e999])] * 3),
        True,
    ),
    "mismatched_lengths": lambda rng, _: (
        _group_with(rng, rewards=[0.0, 1.0]) if rng.random() < 0.5 else _group_with(rng, completions=["x"] * 65),
        True,
    ),
    "wrong_version": lambda rng, v: (_set(rng.choice(v), v=rng.choice([0, 1, 3, -1, "2", None, 2.5, 2**70, []])), True),
    "unknown_type": lambda rng, v: (
        _set(rng.choice(v), type=rng.choice(["welcome", "ack", "groups", "error", "x", 1, None])),
        True,
    ),
    "unicode_junk": lambda rng, v: (
        _set(v[0], model=_rand_text(rng, rng.randrange(1, 100)), swarm=_rand_text(rng, 10)),
        True,
    ),
    "lone_surrogate": lambda rng, v: (_dumps(v[0]).replace('"fuzzer"', '"\\ud800x"'), True),
    "bad_keys": lambda rng, v: (
        _set(v[0], public_key=rng.choice([_b64(rng.randbytes(31)), _b64(rng.randbytes(33)), "A" * 44 + "\n",
                                          "!" * 44, "", 7, "a" * 64])),
        True,
    ),
    "forged_group": lambda rng, _: (_group_with(rng), True),  # a random signature: refused, then abuse
    "forged_report": lambda rng, v: (_set(v[4], signature=_b64(rng.randbytes(64))), True),
    "bad_signature_shape": lambda rng, v: (
        _set(rng.choice([v[1], v[4], v[5]]), signature=rng.choice([_b64(rng.randbytes(63)), "x", 5, None])),
        True,
    ),
    "extra_fields": lambda rng, v: (_set(rng.choice(v), evil=_rand_json(rng)), True),
    "duplicate_keys": lambda rng, v: (_dumps(rng.choice(v))[:-1] + ', "type": "hello"}', True),
    "second_hello": lambda rng, v: (_dumps(v[0]), True),
    "empty": lambda rng, _: ("" if rng.random() < 0.5 else b"", rng.random() < 0.5),
    "oversize": lambda rng, _: ('{"type":"stats","v":3,"pad":"' + "x" * (p.MAX_FRAME_BYTES + 10) + '"}', True),
}
# Oversized frames cost a megabyte each; send fewer of them.
WEIGHTS = {name: (1 if name == "oversize" else 20) for name in CATEGORIES}


class Tally:
    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()
        self.replies: Counter[str] = Counter()
        self.closes: Counter[int] = Counter()
        self.reconnects = 0


async def _hostile(url: str, frames: int, rng: random.Random, tally: Tally, counter: list[int]) -> None:
    valid = _valid_messages(rng)
    names, weights = list(CATEGORIES), [WEIGHTS[n] for n in CATEGORIES]
    while counter[0] < frames:
        tally.reconnects += 1
        try:
            ws = await connect(url, max_size=None, open_timeout=10, compression=None)
        except (OSError, InvalidHandshake, TimeoutError):
            await asyncio.sleep(0.05)
            continue
        try:
            if rng.random() < 0.85:  # usually get past hello, so the request path is fuzzed too
                me = Identity.from_seed(rng.randbytes(32))
                hello = p.Hello(swarm="fuzz", public_key=me.public_key, model="fuzzer", client_version="1")
                await ws.send(p.encode(hello))
                challenge = p.decode(await asyncio.wait_for(ws.recv(), 5))
                if not isinstance(challenge, p.Challenge):
                    continue
                await ws.send(p.encode(p.Auth(signature=p.sign_challenge(me, "fuzz", challenge.nonce))))
                await asyncio.wait_for(ws.recv(), 5)
            while counter[0] < frames:
                category = rng.choices(names, weights)[0]
                payload, text = CATEGORIES[category](rng, valid)
                counter[0] += 1
                tally.sent[category] += 1
                await ws.send(payload, text=text)
                reply = await asyncio.wait_for(ws.recv(), 5)
                try:
                    msg = p.decode(reply)
                    tally.replies[msg.code if isinstance(msg, p.Error) else type(msg).__name__] += 1
                except p.ProtocolError:
                    tally.replies["undecodable reply"] += 1
        except ConnectionClosed as exc:
            tally.closes[exc.rcvd.code if exc.rcvd else 1006] += 1
        finally:
            # After the relay closed on a half-written 1 MB frame, Python 3.11's asyncio can
            # fail inside close() (transport already gone); this is the attacker's cleanup.
            with contextlib.suppress(Exception):
                await ws.close()


async def _good(url: str, stop: asyncio.Event, deadline_s: float) -> tuple[int, list[str]]:
    """Two honest nodes: A publishes, B samples; every reply must come in time and be right."""
    rng = random.Random(1)
    served, failures = 0, []
    async with SimNode(url, swarm="good") as a, SimNode(url, swarm="good") as b:
        for node in (a, b):
            if not isinstance(await node.connect(), p.Welcome):
                return 0, ["hello refused"]
        round_ = 0
        while not stop.is_set():
            round_ += 1
            try:
                ack = await a.request(a.publish_message(synthetic_group(rng, round_=round_)), deadline_s)
                got = await b.request(p.Sample(n=2, max_age_s=60), deadline_s)
                if not (isinstance(ack, p.Ack) and ack.accepted == 1 and isinstance(got, p.Groups) and got.groups):
                    failures.append(f"round {round_}: {ack!r:.80} / {got!r:.80}")
                served += 2
            except (TimeoutError, ConnectionClosed, p.ProtocolError) as exc:
                failures.append(f"round {round_}: {type(exc).__name__} {exc}")
                return served, failures
            await asyncio.sleep(0.01)
    return served, failures


async def fuzz(
    url: str, frames: int, connections: int, seed: int, deadline_s: float = 2.0
) -> tuple[Tally, int, list[str], float]:
    tally, counter, stop = Tally(), [0], asyncio.Event()
    started = time.monotonic()
    good = asyncio.create_task(_good(url, stop, deadline_s))
    await asyncio.gather(*(_hostile(url, frames, random.Random(seed + i), tally, counter) for i in range(connections)))
    stop.set()
    served, failures = await good
    return tally, served, failures, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.relay_fuzz", description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=10_000)
    ap.add_argument("--connections", type=int, default=4, help="hostile connections at a time")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--relay-args", default="",
                    help="more sapo-relay arguments, e.g. '--redis redis://127.0.0.1:6379/0' (the Redis backend)")
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="sapo-fuzz-"))
    relay = spawn_relay(["--rate", "1e6", "--burst", "1000000", "--bytes-rate", "1e10", "--groups-per-minute", "1000000",
                         *shlex.split(args.relay_args)], workdir)
    print(f"relay: spawned pid {relay.proc.pid} at {relay.url}")
    try:
        tally, served, failures, took = asyncio.run(fuzz(relay.url, args.frames, args.connections, args.seed))
        alive = relay.proc.poll() is None
        health = http_get(relay.http + "/healthz") if alive else "(relay is dead)"
        metrics = http_get(relay.http + "/metrics") if alive else ""
    finally:
        rc = relay.stop()
    crashes = next(
        (
            float(line.split()[-1])
            for line in metrics.splitlines()
            if line.startswith("sapo_relay_handler_crashes_total")
        ),
        float("nan"),
    )
    print(f"hostile frames sent: {sum(tally.sent.values())} in {took:.1f} s over {tally.reconnects} connections")
    print("  by category: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.sent.items())))
    print("  replies: " + ", ".join(f"{k} {v}" for k, v in tally.replies.most_common()))
    print("  closed by relay, by code: " + ", ".join(f"{k} x{v}" for k, v in sorted(tally.closes.items())))
    print(f"good client: {served} requests served, {len(failures)} failed")
    for failure in failures[:5]:
        print(f"  {failure}")
    tracebacks = relay.log_path.read_text(errors="replace").count("Traceback")
    print(f"relay: alive during run {alive}, /healthz {health}, handler crashes {crashes:g}, "
          f"tracebacks in its log {tracebacks}, exit code {rc}")  # fmt: skip
    if rc != 0 or failures or not alive or crashes != 0 or tracebacks:
        print(relay.log_tail())
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
