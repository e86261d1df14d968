"""What a round costs when a peer floods the pool with long groups, against a normal round.

The issue's attack: 8 groups of 8 completions of ~15,000 characters, published through a relay
on 127.0.0.1; here the valid answer comes first, so that what is left after the receiver's cut
still has reward spread and is trained on at full length (the costliest case); a node on the bundled model samples them
(``--local 2 --external 2 --completions 4 --max-tokens 64``). Normal: the same node and
settings with an empty pool (it makes all 4 groups itself). Alternating runs, each a fresh
data dir, ``--rounds`` rounds; prints the median round time of each and their ratio.

    python benchmarks/bench_hostile_round.py [--runs 2] [--rounds 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import msgspec
from websockets.sync.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/ is the repository's, not an installed package

from engine.tasks.questions import QuestionStream, build_mix  # noqa: E402
from tools.relay_loadgen import free_port, http_get  # noqa: E402
from wire import protocol as p  # noqa: E402
from wire.identity import Identity, node_id_for  # noqa: E402

FLAGS = ["--model", "smollm2-135m", "--tasks", "basic_arithmetic", "--local", "2", "--external", "2",
         "--completions", "4", "--max-tokens", "64", "--eval-every", "0", "--quiet"]


def start_relay(data: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "relay", "--host", "127.0.0.1", "--port", str(port),
                             "--data-dir", str(data), "--log-level", "WARNING"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            http_get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc, f"ws://127.0.0.1:{port}"
        except OSError:
            import time
            time.sleep(0.1)
    raise RuntimeError("relay did not start")


def _send(ws, frame: dict) -> dict:
    ws.send(json.dumps({**frame, "v": p.PROTOCOL_VERSION}))
    return json.loads(ws.recv(timeout=30))


def publish_raw(url: str, swarm: str, groups_for: Callable[[str], list[dict]], me: Identity | None = None) -> int:
    """Publish ``groups_for(node_id)`` one a frame (a frame is at most 1 MB), as raw JSON from a hand-written client
    with a key of its own (``me``, else a new one); the number the relay accepted. The groups are made for the
    client's node id, because a relay takes only groups drawn from their author's own question stream
    (``wire.protocol.authored_by``)."""
    me = me or Identity.generate()
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    ws = connect(url, max_size=p.MAX_FRAME_BYTES)
    nonce = _send(ws, {"type": "hello", "swarm": swarm, "public_key": b64(me.public_key), "model": "evil",
                       "client_version": "evil/1"})["nonce"]
    _send(ws, {"type": "auth", "signature": b64(p.sign_challenge(me, swarm, base64.b64decode(nonce)))})
    accepted = 0
    for g in groups_for(node_id_for(me.public_key)):
        sig = b64(p.sign_group(me, swarm, msgspec.convert(g, p.Group)))
        reply = _send(ws, {"type": "publish", "groups": [g], "signatures": [sig]})
        accepted += reply["accepted"]
        for r in reply.get("rejected", []):
            print(f"relay refused a flood group: {r['reason']}", file=sys.stderr)
    ws.close()
    return accepted


def long_groups(node_id: str) -> list[dict]:
    """8 groups of 8 completions of ~15,000 characters on ``node_id``'s own questions, the valid answer first."""
    qs = QuestionStream(build_mix("easy", tasks=["basic_arithmetic"]), node_id, 0, []).draw(8)
    pad = "Let me think about this step by step, carefully. " * 300  # ~15,000 characters
    groups = []
    for q in qs:
        spec = {"dataset": q.spec.dataset, "config": q.spec.config, "seed": q.spec.seed, "index": q.spec.index}
        groups.append({"spec": spec, "question": q.question, "answer": q.answer, "model": "evil", "round": 1,
                       "completions": [f"<answer>{q.answer}</answer>" + pad, "<answer>-99</answer>" + pad] * 4,
                       "rewards": [1.0, 0.0] * 4})
    return groups


def flood(url: str, swarm: str) -> int:
    return publish_raw(url, swarm, long_groups)


def one_run(url: str, swarm: str, rounds: int, threads: int, cache: Path, flags: list[str] = FLAGS) -> list[dict]:
    """A fresh node's ``rounds`` rounds with ``flags`` against the relay at ``url``: its round events."""
    with tempfile.TemporaryDirectory() as tmp:
        events = Path(tmp) / "events.jsonl"
        subprocess.run([sys.executable, "-m", "engine", "run", *flags, "--threads", str(threads), "--relay", url,
                        "--swarm", swarm, "--rounds", str(rounds), "--data-dir", tmp, "--events", str(events)],
                       check=True, env={**os.environ, "SAPO_CACHE_DIR": str(cache)})
        return [e for e in map(json.loads, events.read_text().splitlines()) if e["type"] == "round"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    cache = Path(os.environ.get("SAPO_CACHE_DIR", tempfile.mkdtemp()))
    times: dict[str, list[float]] = {"normal": [], "hostile": []}
    with tempfile.TemporaryDirectory() as relay_dir:
        relay, url = start_relay(Path(relay_dir))
        try:
            for run in range(args.runs):
                for kind in ("normal", "hostile"):
                    swarm = f"{kind}-{run}"
                    if kind == "hostile":
                        print(f"published {flood(url, swarm)} long groups", flush=True)
                    rounds = one_run(url, swarm, args.rounds, args.threads, cache)
                    times[kind] += [r["round_s"] for r in rounds]
                    print(kind, [(r["round_s"], r["external_groups"], r["rejected_reasons"], r["tokens_trained"])
                                 for r in rounds], flush=True)
        finally:
            relay.terminate()
    normal, hostile = (statistics.median(times[k]) for k in ("normal", "hostile"))
    print(f"round time, median: normal {normal:.2f} s, with 2 long hostile groups sampled {hostile:.2f} s "
          f"-> {hostile / normal:.2f}x")


if __name__ == "__main__":
    main()
