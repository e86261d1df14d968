"""Load generator: N simulated nodes publish and sample against a relay.

    python -m tools.relay_loadgen --spawn --nodes 1000 --seconds 20

Each node says hello, then loops until the time is up: publish one group, sample
4, publish, sample, ..., and every 10th request asks for stats. Nodes are paced so
that together they offer ``--rate`` requests per second (``--rate 0``: each node
sends its next request as soon as the reply arrives). Prints the sustained request
rate, client-side request latency (send -> reply), the relay's own latency
histogram, and the relay's RSS and CPU (psutil; the relay is spawned with
``--spawn`` or named with ``--relay-pid``). Nodes may be split over ``--procs``
processes when one client process cannot keep up.

Also home of ``SimNode``, the small client that the fuzzer and the tests use.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import queue
import random
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from array import array
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import psutil
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import ClientConnection, connect

from wire import protocol as p
from wire.identity import Identity, display_name

CLIENT_VERSION = "sapo-loadgen/0.2"


def synthetic_group(
    rng: random.Random, *, dataset: str = "basic_arithmetic", completions: int = 4, chars: int = 500, round_: int = 0,
    author: str | None = None,
) -> p.Group:
    """A plausible group of the given size, with reward spread (so the relay keeps it); with ``author``, its
    question seed is in that node's stream (``p.with_author``: the relay pools only an author's own questions)."""
    words = ("so", "the", "answer", "is", "therefore", "we", "add", "carry", "check", "<answer>", "</answer>")
    texts = [" ".join(rng.choices(words, k=chars // 5))[:chars] for _ in range(completions)]
    rewards = [float(i % 2) for i in range(completions)]
    group = p.Group(
        spec=p.TaskSpec(
            dataset=dataset, config={"min_digits": 2}, seed=rng.randrange(2**31), index=rng.randrange(10**6)
        ),
        question=f"What is {rng.randrange(1000)} + {rng.randrange(1000)}?",
        answer=str(rng.randrange(2000)),
        completions=texts,
        rewards=rewards,
        model="sim-model",
        round=round_,
    )
    return group if author is None else p.with_author(group, author)


class SimNode:
    """One simulated node: a websocket connection that speaks the protocol, one request at a time.

    It holds a real key (``identity``; a random one unless given) and signs as a node does:
    the relay's challenge in ``connect``, its groups in ``publish_message``, its reports in
    ``report_message``.
    """

    def __init__(
        self,
        url: str,
        *,
        swarm: str = "loadgen",
        identity: Identity | None = None,
        token: str | None = None,
        model: str = "sim-model",
    ) -> None:
        self.url, self.swarm, self.token, self.model = url, swarm, token, model
        self.identity = identity or Identity.generate()
        self.node_id = self.identity.node_id
        self.name = display_name(self.node_id)
        self.ws: ClientConnection | None = None

    async def connect(self, timeout: float = 10.0) -> p.Message:
        """Open the connection, say hello, sign the challenge; return the reply (Welcome, or an Error before a close)."""
        self.ws = await connect(self.url, max_size=p.MAX_FRAME_BYTES, open_timeout=timeout, compression=None)
        hello = p.Hello(
            swarm=self.swarm, public_key=self.identity.public_key, model=self.model,
            client_version=CLIENT_VERSION, token=self.token,
        )  # fmt: skip
        reply = await self.request(hello, timeout)
        if not isinstance(reply, p.Challenge):
            return reply
        return await self.request(p.Auth(signature=p.sign_challenge(self.identity, self.swarm, reply.nonce)), timeout)

    def publish_message(self, *groups: p.Group, as_author: bool = True) -> p.Publish:
        """Groups signed by this node, their questions moved into its own stream first (``as_author``:
        the relay pools only an author's own questions, wire.authorship)."""
        if as_author:
            groups = tuple(p.with_author(g, self.node_id) for g in groups)
        return p.Publish(groups=list(groups), signatures=[p.sign_group(self.identity, self.swarm, g) for g in groups])

    def report_message(self, round_: int, *groups: p.Group) -> p.Report:
        trained = [p.group_digest(g) for g in groups]
        return p.Report(round=round_, trained=trained,
                        signature=p.sign_report(self.identity, self.swarm, round_, trained))

    async def send_raw(self, frame: str | bytes) -> None:
        assert self.ws is not None
        await self.ws.send(frame)

    async def recv(self, timeout: float = 10.0) -> p.Message:
        assert self.ws is not None
        async with asyncio.timeout(timeout):
            return p.decode(await self.ws.recv())

    async def request(self, msg: p.Message, timeout: float = 10.0) -> p.Message:
        await self.send_raw(p.encode(msg))
        return await self.recv(timeout)

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()

    async def __aenter__(self) -> SimNode:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# --- the relay under test -------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode())


@dataclass
class SpawnedRelay:
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    @property
    def http(self) -> str:
        return "http" + self.url.removeprefix("ws")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def spawn_relay(args: list[str], workdir: Path) -> SpawnedRelay:
    """Start ``python -m relay`` on a free loopback port; wait until /healthz answers."""
    port = free_port()
    log_path = workdir / "relay.log"
    cmd = [sys.executable, "-m", "relay", "--host", "127.0.0.1", "--port", str(port),
           "--data-dir", str(workdir / "data"), "--log-level", "WARNING", *args]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log_path.open("wb"))
    relay = SpawnedRelay(proc, f"ws://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"relay exited with {proc.returncode}:\n{relay.log_tail()}")
        try:
            http_get(relay.http + "/healthz", timeout=1)
            return relay
        except OSError:
            time.sleep(0.1)
    relay.stop()
    raise RuntimeError("relay did not answer /healthz within 20 s")


# --- one worker: a share of the nodes in one asyncio loop -------------------------------------


class _Rejection(msgspec.Struct):
    reason: str


class _Reply(msgspec.Struct):
    """Just enough of a reply to check it: the simulated client must not cost more than the relay."""

    type: str
    code: str | None = None
    rejected: list[_Rejection] = []


_reply_decoder = msgspec.json.Decoder(_Reply)
EXPECTED = {"publish": "ack", "sample": "groups", "stats": "stats_reply"}


@dataclass
class WorkerResult:
    latencies: array[float] = field(default_factory=lambda: array("d"))  # seconds
    kinds: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    connect_failures: int = 0


async def _node_loop(
    node: SimNode,
    rng: random.Random,
    period: float,
    stop_at: float,
    sample_n: int,
    res: WorkerResult,
    templates: list[p.Group],
) -> None:
    cycle = rng.randrange(10)
    next_at = time.perf_counter() + rng.random() * period
    while True:
        now = time.perf_counter()
        if period:
            if next_at > now:
                await asyncio.sleep(next_at - now)
            # Fell far behind (a stall)? Restart the schedule rather than bursting to catch up.
            next_at = max(next_at + period, time.perf_counter() - period)
        if time.perf_counter() >= stop_at:
            return
        cycle += 1
        msg: p.Message
        if cycle % 10 == 0:
            msg, kind = p.StatsRequest(), "stats"
        elif cycle % 2:
            # A fresh task id and question on a pre-made text: making random text per request would
            # cost the client more CPU than the relay spends on the request. (Fresh content: the
            # relay pools each question + completions once.)
            group = rng.choice(templates)
            spec = msgspec.structs.replace(group.spec, seed=rng.randrange(2**31), index=rng.randrange(10**6))
            group = msgspec.structs.replace(group, spec=spec, round=cycle, question=f"{group.question} #{spec.seed}")
            msg, kind = node.publish_message(group), "publish"
        else:
            msg, kind = p.Sample(n=sample_n, max_age_s=600), "sample"
        frame = p.encode_bytes(msg)
        assert node.ws is not None
        t0 = time.perf_counter()
        await node.ws.send(frame, text=True)
        reply = _reply_decoder.decode(await node.ws.recv(decode=False))
        res.latencies.append(time.perf_counter() - t0)
        res.kinds[kind] += 1
        if reply.type != EXPECTED[kind]:
            res.errors[reply.code or f"unexpected {reply.type}"] += 1
        for rejection in reply.rejected:  # a refused group counts too: the load must be real work
            res.errors[f"group {rejection.reason}"] += 1


async def _worker_main(cfg: dict[str, Any], first: int, count: int, ready: Any, go: Any) -> WorkerResult:
    res = WorkerResult()
    rng = random.Random(cfg["seed"] + first)
    nodes = [
        SimNode(cfg["urls"][(first + i) % len(cfg["urls"])], swarm=f"loadgen-{(first + i) % cfg['swarms']}",
                token=cfg["token"],
                identity=Identity.from_seed(rng.randbytes(32)))
        for i in range(count)
    ]  # fmt: skip
    gate = asyncio.Semaphore(64)  # don't open every handshake at once

    async def open_one(node: SimNode) -> SimNode | None:
        async with gate:
            try:
                reply = await node.connect(timeout=30)
            except Exception:  # refused, reset, timed out: all count the same here
                res.connect_failures += 1
                return None
            if not isinstance(reply, p.Welcome):
                res.connect_failures += 1
                return None
            return node

    live = [n for n in await asyncio.gather(*(open_one(n) for n in nodes)) if n is not None]
    ready.put(len(live))
    await asyncio.get_running_loop().run_in_executor(None, go.wait)
    total_nodes, rate = cfg["nodes"], cfg["rate"]
    period = total_nodes / rate if rate else 0.0
    stop_at = time.perf_counter() + cfg["seconds"]
    templates = [synthetic_group(rng, completions=cfg["completions"], chars=cfg["chars"]) for _ in range(32)]

    async def run_one(node: SimNode, seed: int) -> None:
        try:
            await _node_loop(node, random.Random(seed), period, stop_at, cfg["sample_n"], res, templates)
        except Exception as exc:  # a dropped connection: count it, keep the others going
            res.errors[f"exception:{type(exc).__name__}"] += 1

    await asyncio.gather(*(run_one(n, rng.getrandbits(32)) for n in live))
    await asyncio.gather(*(n.close() for n in live), return_exceptions=True)
    return res


def _worker(cfg: dict[str, Any], first: int, count: int, ready: Any, go: Any, out: Any) -> None:
    res = asyncio.run(_worker_main(cfg, first, count, ready, go))
    out.put((res.latencies.tobytes(), dict(res.kinds), dict(res.errors), res.connect_failures))


# --- the parent: relay, workers, measurements ---------------------------------------------


def _relay_quantiles(text: str, name: str, qs: tuple[float, ...]) -> dict[float, float] | None:
    """Quantiles (bucket upper bounds) of one of the relay's histograms, all labels together."""
    buckets: dict[float, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        if family.name == name:
            for s in family.samples:
                if s.name.endswith("_bucket"):
                    buckets[float(s.labels["le"])] += s.value
    total = buckets.get(float("inf"), 0)
    if not total:
        return None
    ordered = sorted(buckets.items())
    return {q: next(le for le, c in ordered if c >= q * total) for q in qs}


def _cpu_seconds(procs: list[psutil.Process], last: dict[int, float]) -> float:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            last[proc.pid] = sum(proc.cpu_times()[:2])
    return sum(last.values())


def _pct(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))] if sorted_values else float("nan")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tools.relay_loadgen", description=__doc__.split("\n")[0])
    target = ap.add_mutually_exclusive_group(required=True)
    target.add_argument("--spawn", action="store_true", help="start a relay on a free loopback port, and stop it after")
    target.add_argument("--url", help="an already running relay, e.g. ws://127.0.0.1:8765; several replicas "
                                      "comma-separated: nodes spread over them in turn, as a load balancer would")
    ap.add_argument("--relay-pid", type=int, help="with --url: the relay's pid, to report its RSS and CPU")
    ap.add_argument(
        "--relay-args",
        default="--rate 100 --burst 200 --groups-per-minute 100000",
        help="extra sapo-relay arguments with --spawn (default: %(default)r: per-node limits above the load)",
    )
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=2500.0, help="requests/s offered by all nodes (0: closed loop)")
    ap.add_argument("--procs", type=int, default=1, help="client processes to spread the nodes over")
    ap.add_argument("--swarms", type=int, default=1)
    ap.add_argument("--sample-n", type=int, default=4)
    ap.add_argument("--completions", type=int, default=4)
    ap.add_argument("--chars", type=int, default=500, help="characters per completion")
    ap.add_argument("--token", default=None)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.nodes < 1 or args.procs < 1 or args.seconds <= 0 or args.rate < 0:
        print("loadgen: --nodes, --procs and --seconds must be positive, --rate >= 0", file=sys.stderr)
        return 2
    relay: SpawnedRelay | None = None
    workdir = Path(tempfile.mkdtemp(prefix="sapo-loadgen-"))
    if args.spawn:
        relay = spawn_relay(shlex.split(args.relay_args), workdir)
        url, pid, http = relay.url, relay.proc.pid, relay.http
        print(f"relay: spawned pid {pid} at {url} with {args.relay_args!r}")
    else:
        url, pid = args.url, args.relay_pid
        http = "http" + url.split(",")[0].strip().removeprefix("ws")  # /metrics and /healthz of the first
    watched = psutil.Process(pid) if pid else None
    cfg = {
        k: getattr(args, k)
        for k in ("nodes", "rate", "seconds", "swarms", "sample_n", "completions", "chars", "token", "seed")
    }
    cfg["urls"] = [u.strip() for u in url.split(",") if u.strip()]
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    shares = [args.nodes // args.procs + (i < args.nodes % args.procs) for i in range(args.procs)]
    firsts = [sum(shares[:i]) for i in range(args.procs)]
    workers = [
        ctx.Process(target=_worker, args=(cfg, f, n, ready, go, out)) for f, n in zip(firsts, shares, strict=True) if n
    ]
    try:
        t0 = time.monotonic()
        for w in workers:
            w.start()
        connected = sum(ready.get(timeout=300) for _ in workers)
        took = time.monotonic() - t0
        print(f"connected {connected}/{args.nodes} nodes in {took:.1f} s ({len(workers)} client process(es))")
        rss = [watched.memory_info().rss] if watched else []
        cpu0 = sum(watched.cpu_times()[:2]) if watched else 0.0
        clients = [psutil.Process(w.pid) for w in workers]
        client_cpu0 = _cpu_seconds(clients, {})
        client_last: dict[int, float] = {}  # a worker that has exited keeps its last reading
        go.set()
        started = time.monotonic()
        results: list[tuple[bytes, dict[str, int], dict[str, int], int]] = []
        while len(results) < len(workers):
            with contextlib.suppress(queue.Empty):  # then sample the relay and wait on
                results.append(out.get(timeout=0.5))
            if watched:
                rss.append(watched.memory_info().rss)
            client_cpu = _cpu_seconds(clients, client_last) - client_cpu0
        wall = time.monotonic() - started
        cpu = (sum(watched.cpu_times()[:2]) - cpu0) / wall if watched else None
        for w in workers:
            w.join()
    finally:
        for w in workers:
            if w.is_alive():
                w.terminate()
        go.set()

    lat: list[float] = []
    kinds: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    failures = 0
    for raw, k, e, f in results:
        lat.extend(array("d", raw))
        kinds.update(k)
        errors.update(e)
        failures += f
    lat.sort()
    total = len(lat)
    offered = f"offered {args.rate:g}/s" if args.rate else "closed loop"
    mix = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    print(
        f"requests: {total} in {args.seconds:g} s = {total / args.seconds:.0f} msg/s sustained ({offered}; {mix}); "
        f"errors: {dict(errors) or 0}, connect failures: {failures}"
    )
    print(f"frames both ways: {2 * total / args.seconds:.0f}/s")
    print(
        "latency (client, send->reply): "
        + "  ".join(f"p{int(q * 100)} {_pct(lat, q) * 1000:.1f} ms" for q in (0.5, 0.9, 0.99))
        + f"  max {lat[-1] * 1000 if lat else float('nan'):.1f} ms"
    )
    try:
        metrics = http_get(http + "/metrics")
    except OSError:
        metrics = ""
    for label, name in (
        ("relay request time (its histogram, bucket bound)", "sapo_relay_request_seconds"),
        ("relay event-loop lag (bucket bound)", "sapo_relay_loop_lag_seconds"),
    ):
        found = _relay_quantiles(metrics, name, (0.5, 0.99))
        if found:
            print(f"{label}: " + "  ".join(f"p{int(q * 100)} <= {v * 1000:g} ms" for q, v in found.items()))
    if watched and rss:
        print(
            f"relay RSS: start {rss[0] / 2**20:.0f} MiB, peak {max(rss) / 2**20:.0f} MiB, "
            f"end {rss[-1] / 2**20:.0f} MiB; "
            f"relay CPU {100 * (cpu or 0):.0f}% of one core; "
            f"load generator CPU {100 * client_cpu / wall:.0f}% (machine: {psutil.cpu_count()} cores, "
            f"load average {psutil.getloadavg()[0]:.1f})"
        )
    try:
        health = json.loads(http_get(http + "/healthz"))
        print(f"relay /healthz: {health}")
    except OSError as exc:
        print(f"relay /healthz failed: {exc}")
    if relay is not None:
        rc = relay.stop()
        print(f"relay: stopped, exit code {rc}")
    return 0 if total and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
