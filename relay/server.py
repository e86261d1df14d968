"""The relay server: a thin asyncio layer (``websockets``) over the pure pool and stats.

One process serves many swarms; a swarm only ever sees its own groups. Each
connection is handled on its own: requests are answered in order, one reply per
frame, and nothing a peer sends can stop another peer's handler. Plain HTTP
``GET /healthz`` and ``GET /metrics`` are answered on the same port.

A node is admitted only after it signs a fresh challenge with the key its id is derived
from, so nobody can connect (or knock a node off) as someone else. Every published group
must carry its author's signature, checked here before it is pooled (and again by every
receiver), and a question of its author's own stream (``not_author`` otherwise: a copy, wire.authorship);
"adopted" is counted only from a receiver's signed report of what it trained.

The pool and stats live in a ``relay.backend.Backend``: in this process (the default) or in Redis,
shared by several replicas (``RelayConfig.redis_url``). When Redis cannot be reached, requests are
answered with ``Code.UNAVAILABLE`` and ``/healthz`` says 503 until it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from wire import identity as ident
from wire import protocol as p
from wire.manifest import manifest_bytes
from relay.backend import STATS_FILE, Backend, EmbeddedBackend, Unavailable
from relay.metrics import Metrics
from relay.pool import Pool, PoolLimits
from relay.stats import StatsStore
from relay.status import public_swarms, relay_status, swarm_status
from relay.status_page import CSP, HTML
from relay.swarms import SwarmEntry, sign_swarms
from relay.tls import server_context

log = logging.getLogger("relay.server")

SERVER_VERSION = "sapo-relay/0.1.0"
__all__ = ["STATS_FILE", "Relay", "RelayConfig"]
_TAGS: dict[type, str] = {
    cls: str(cls.__struct_config__.tag)
    for cls in (*p.CLIENT_MESSAGES, p.Challenge, p.Welcome, p.Ack, p.Groups, p.StatsReply, p.Error)
}


@dataclass(frozen=True)
class RelayConfig:
    """Everything the relay can be told; checked once, here."""

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 8765  # 0: any free port (see Relay.port once started)
    token: str | None = None  # when set, hello must carry it
    allowed_keys: frozenset[str] | None = None  # when set, only these node ids are admitted (private swarms)
    pool: PoolLimits = field(default_factory=PoolLimits)
    max_completions: int = p.MAX_COMPLETIONS  # per group; announced in Welcome.limits
    max_completion_chars: int = p.MAX_COMPLETION_CHARS
    max_question_chars: int = p.MAX_QUESTION_CHARS
    rate_per_s: float = 20.0  # messages per connection (token bucket)
    burst: int = 40
    bytes_per_s: float = 4 << 20
    bytes_burst: int = 8 << 20  # at least one max-size frame
    error_per_s: float = 1.0  # refused frames a connection may send before it is closed (1008)
    error_burst: int = 20
    hello_timeout_s: float = 10.0
    max_peers: int = 5000
    max_peers_per_address: int | None = None  # connections admitted from one IP address (None: no cap)
    max_swarms: int = 256
    flush_interval_s: float = 1.0
    compression: bool = False  # permessage-deflate: less bandwidth, much more relay CPU
    redis_url: str | None = None  # redis://HOST:PORT/DB: pool and stats in Redis, shared by replicas
    redis_prefix: str = "sapo"  # Redis key prefix (several deployments can share one Redis)
    tls_cert: Path | None = None  # both set: serve wss:// and https:// (relay/tls.py)
    tls_key: Path | None = None
    status_page: bool = True  # GET / and /swarm/NAME, and their JSON under /api/ (public: relay/status.py)
    seed: int | None = None  # the in-memory pool's draws seeded, per swarm (relay.pool): experiments repeat
    # --swarms FILE (relay/swarms.py): when set, only these swarms are served, each node is welcomed with its
    # swarm's manifest, and a swarm's own token (private swarms) is checked as the relay's is.
    swarms: dict[str, SwarmEntry] | None = None
    # --manifest-key FILE (relay/manifest_key.py): each declared manifest is signed with it once, at start, and
    # the welcome and GET /swarms carry the signature and signer.
    manifest_key: ident.Identity | None = None
    # --manifest-key-handover FILE: the chain from the operator's earlier keys to manifest_key, in every welcome.
    manifest_handovers: tuple[p.KeyHandover, ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0..65535, not {self.port}")
        if self.token is not None and not self.token:
            raise ValueError("token must not be empty")
        for name in ("rate_per_s", "bytes_per_s", "error_per_s", "hello_timeout_s", "flush_interval_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        for name in ("burst", "error_burst", "max_peers", "max_swarms"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_peers_per_address is not None and self.max_peers_per_address < 1:
            raise ValueError("max_peers_per_address must be at least 1")
        if self.bytes_burst < p.MAX_FRAME_BYTES:
            raise ValueError(f"bytes_burst must be at least one frame ({p.MAX_FRAME_BYTES} bytes)")
        for name, most in (("max_completions", p.MAX_COMPLETIONS), ("max_completion_chars", p.MAX_COMPLETION_CHARS),
                           ("max_question_chars", p.MAX_QUESTION_CHARS)):
            if not 1 <= getattr(self, name) <= most:
                raise ValueError(f"{name} must be 1..{most}")
        if self.max_completions < 2:
            raise ValueError("max_completions must be at least 2 (a group needs two answers to compare)")
        if self.redis_url is not None:
            from relay.redis_backend import check_redis_url

            check_redis_url(self.redis_url)
        if not self.redis_prefix or not self.redis_prefix.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"redis_prefix must be letters, digits, - or _, not {self.redis_prefix!r}")
        if self.seed is not None and self.redis_url is not None:
            raise ValueError("--seed seeds the in-memory pool; with --redis each replica draws its own")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both a certificate (--tls-cert) and its key (--tls-key)")
        if self.manifest_key is not None and self.swarms is None:
            raise ValueError("a manifest key signs declared swarms' manifests: declare swarms (--swarms) too")


class TokenBucket:
    """``capacity`` tokens, refilled at ``rate`` per second."""

    __slots__ = ("rate", "capacity", "tokens", "stamp")

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate, self.capacity, self.tokens, self.stamp = rate, capacity, capacity, now

    def take(self, amount: float, now: float) -> bool:
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < amount:
            return False
        self.tokens -= amount
        return True


@dataclass(eq=False, slots=True)
class _Session:
    ws: ServerConnection
    swarm: str
    node_id: str  # derived from public_key, which signed this connection's challenge
    public_key: bytes
    address: str
    model: str  # as the peer announced it: shown on the status page as text only
    messages: TokenBucket
    bytes: TokenBucket
    errors: TokenBucket


class Relay:
    """``await start()``, ``await stop()`` (safe twice); or ``async with Relay(config):``."""

    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        self.backend: Backend
        if config.redis_url is not None:
            from relay.redis_backend import RedisBackend

            self.backend = RedisBackend(config.redis_url, config.pool, prefix=config.redis_prefix)
        else:
            self.backend = EmbeddedBackend(config.pool, config.data_dir, seed=config.seed)
        self.metrics = Metrics(self)
        self.peers: dict[str, dict[str, _Session]] = {}  # swarm -> node_id -> session
        self.per_address: dict[str, int] = {}  # admitted sessions per remote address
        self.port = config.port
        self._server: Server | None = None
        self._chores: list[asyncio.Task[None]] = []
        self._stopping: asyncio.Future[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        c = config
        # The declared swarms, each manifest signed where the operator gave a manifest key (once per start).
        self.swarms: dict[str, SwarmEntry] | None = c.swarms
        if c.swarms is not None and c.manifest_key is not None:
            self.swarms = sign_swarms(c.swarms, c.manifest_key, c.manifest_handovers)
        # Each declared swarm's manifest as the welcome carries it (plain JSON, encoded once per start).
        self._manifests: dict[str, dict[str, Any]] = {
            name: msgspec.json.decode(manifest_bytes(entry.manifest)) for name, entry in (self.swarms or {}).items()}
        self._limits = p.Limits(
            max_frame_bytes=p.MAX_FRAME_BYTES,
            max_groups_per_publish=p.MAX_GROUPS_PER_PUBLISH,
            max_sample_n=p.MAX_SAMPLE_N,
            max_task_filters=p.MAX_TASK_FILTERS,
            max_completions=c.max_completions,
            max_completion_chars=c.max_completion_chars,
            max_question_chars=c.max_question_chars,
            groups_per_minute=c.pool.groups_per_minute,
            groups_per_author=c.pool.per_author,
            pool_max_age_s=c.pool.max_age_s,
            rate_per_s=c.rate_per_s,
            burst=c.burst,
        )

    @property
    def pool(self) -> Pool | None:
        """The in-memory pool (embedded backend only; tests look inside it)."""
        return self.backend.pool if isinstance(self.backend, EmbeddedBackend) else None

    @property
    def stats(self) -> StatsStore | None:
        return self.backend.stats if isinstance(self.backend, EmbeddedBackend) else None

    @property
    def peer_count(self) -> int:
        return sum(len(nodes) for nodes in self.peers.values())

    async def __aenter__(self) -> Relay:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Open the backend (stats database or Redis), then listen. Raises OSError / sqlite3.Error /
        TLSSetupError / relay.backend.Unavailable on bad setup."""
        c = self.config
        tls = server_context(c.tls_cert, c.tls_key) if c.tls_cert is not None and c.tls_key is not None else None
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        await self.backend.start()
        try:
            self._server = await serve(
                self._handle,
                self.config.host,
                self.config.port,
                process_request=self._http,
                max_size=p.MAX_FRAME_BYTES,
                # Requests are answered one at a time, so a deep receive queue only lets one
                # peer park megabytes here: 4 frames, then TCP backpressure.
                max_queue=4,
                compression="deflate" if self.config.compression else None,
                close_timeout=5,
                ssl=tls,
            )
        except BaseException:
            await self.backend.close()
            raise
        self.port = self._server.sockets[0].getsockname()[1]
        self._chores = [asyncio.create_task(self._flush_loop()), asyncio.create_task(self._lag_probe())]
        scheme = "wss" if tls is not None else "ws"
        log.info("listening on %s://%s:%d (%s state, data in %s)", scheme, self.config.host, self.port,
                 self.backend.kind, self.config.data_dir)
        if self.config.manifest_key is not None:
            log.info("manifests signed by key %s", self.config.manifest_key.public_key.hex())

    async def stop(self) -> None:
        """Close every connection (1001), wait for handlers, flush stats. Safe to call twice."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._shutdown())
        await asyncio.shield(self._stopping)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in (*self._chores, *self._background):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.backend.close()
        log.info("stopped")

    async def _flush_loop(self) -> None:
        last_summary = time.monotonic()
        while True:
            await asyncio.sleep(self.config.flush_interval_s)
            try:
                await self.backend.housekeeping(time.time(), {name: len(nodes) for name, nodes in self.peers.items()})
            except Exception:
                log.exception("periodic flush failed")
            if time.monotonic() - last_summary >= 60:
                last_summary = time.monotonic()
                log.info(
                    "%d peers in %d swarms; pool %d groups, %.1f MiB",
                    self.peer_count, len(self.peers), self.backend.pool_groups, self.backend.pool_bytes / 2**20,
                )  # fmt: skip

    async def _lag_probe(self) -> None:
        """How late the event loop wakes up: the wait every request sees before it is read."""
        while True:
            started = time.monotonic()
            await asyncio.sleep(0.05)
            self.metrics.loop_lag.observe(max(0.0, time.monotonic() - started - 0.05))

    # --- plain HTTP -----------------------------------------------------------------

    def _http(self, conn: ServerConnection, request: Request) -> Response | None | Awaitable[Response | None]:
        path = request.path.partition("?")[0]
        if path == "/healthz":
            healthy = self.backend.healthy
            body = {
                "status": "ok" if healthy else "unavailable",
                "version": SERVER_VERSION,
                "state": self.backend.kind,
                "peers": self.peer_count,
                "pool_groups": self.backend.pool_groups,
            }
            # Non-200 when the shared state is unreachable, so a load balancer stops sending nodes here.
            return _response(conn, json.dumps(body), "application/json", 200 if healthy else 503)
        if path == "/metrics":
            return _response(conn, generate_latest(self.metrics.registry).decode(), CONTENT_TYPE_LATEST)
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return None  # a node connecting (at any path, "/" included)
        return self._status_http(conn, path)  # a coroutine: websockets awaits it

    async def _status_http(self, conn: ServerConnection, path: str) -> Response | None:
        """The status page and its JSON (relay/status.py); a 404 for anything else that is not a websocket."""
        if self.config.status_page:
            if path == "/" or (path.startswith("/swarm/") and p.swarm_name_problem(path[7:]) is None):
                response = _response(conn, HTML, "text/html; charset=utf-8")
                response.headers["Content-Security-Policy"] = CSP
                response.headers["X-Content-Type-Options"] = "nosniff"
                response.headers["Referrer-Policy"] = "no-referrer"
                return response
            try:
                if path == "/api/swarms":
                    return _response(conn, json.dumps(await relay_status(self, declared=self.swarms)),
                                     "application/json")
                if path == "/swarms":  # the public swarms, for people and programs (the app's wizard)
                    body = {"swarms": await public_swarms(self, self.swarms), "time": round(time.time(), 3)}
                    return _response(conn, json.dumps(body), "application/json")
                if path.startswith("/api/swarm/") and p.swarm_name_problem(path[11:]) is None:
                    return _response(conn, json.dumps(await swarm_status(self, path[11:])), "application/json")
            except Unavailable:
                return _response(conn, json.dumps({"error": "unavailable"}), "application/json", 503)
        if path in ("/", "/swarms") or path.startswith(("/swarm/", "/api/")):
            response = conn.respond(404, "not found\n")
            response.headers["Cache-Control"] = "no-store"
            return response
        return None  # websockets' own answer (426: a websocket endpoint)

    # --- websocket --------------------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        self.metrics.connections.inc()
        session = None
        try:
            session = await self._greet(ws)
            if session is not None:
                await self._serve(session)
        except ConnectionClosed:
            pass
        except Exception:
            # A bug, not the peer's fault: log it, close this connection only, say nothing inside.
            log.exception("connection handler crashed")
            self.metrics.crashes.inc()
            self.metrics.closes.labels("1011").inc()
            with contextlib.suppress(Exception):  # the connection may be past closing already
                await ws.close(1011, "internal error")
        finally:
            if session is not None:
                self._leave(session)

    async def _greet(self, ws: ServerConnection) -> _Session | None:
        """hello -> challenge -> auth -> welcome, all within ``hello_timeout_s``; None if refused."""
        try:
            async with asyncio.timeout(self.config.hello_timeout_s):
                hello = await self._expect(ws, p.Hello, "the first message must be hello")
                if hello is None:
                    return None
                node_id = ident.node_id_for(hello.public_key)
                address = _address(ws)
                try:
                    self._admit(hello, node_id, address)
                except p.ProtocolError as err:
                    await self._refuse(ws, err)
                    return None
                nonce = secrets.token_bytes(ident.NONCE_BYTES)
                await ws.send(p.encode_bytes(p.Challenge(nonce=nonce)), text=True)
                auth = await self._expect(ws, p.Auth, "hello is answered with auth (the signed challenge)")
                if auth is None:
                    return None
        except TimeoutError:
            await self._refuse(ws, p.ProtocolError(p.Code.TIMEOUT, "no hello and auth in time"))
            return None
        if not p.challenge_ok(hello.public_key, auth.signature, hello.swarm, nonce):
            await self._refuse(ws, p.ProtocolError(p.Code.UNAUTHORIZED, "the challenge signature does not match "
                                                   "the public key: connect with your own key"))
            return None
        try:
            self._admit(hello, node_id, address)  # again: the relay may have filled up while we waited
        except p.ProtocolError as err:
            await self._refuse(ws, err)
            return None
        mono, now, c = time.monotonic(), time.time(), self.config
        session = _Session(
            ws, hello.swarm, node_id, hello.public_key, address, hello.model,
            messages=TokenBucket(c.rate_per_s, c.burst, mono),
            bytes=TokenBucket(c.bytes_per_s, c.bytes_burst, mono),
            errors=TokenBucket(c.error_per_s, c.error_burst, mono),
        )  # fmt: skip
        try:
            await self.backend.touch(hello.swarm, node_id, now)
        except Unavailable:
            await self._refuse(ws, _UNAVAILABLE)
            return None
        swarm = self.peers.setdefault(hello.swarm, {})
        old = swarm.get(node_id)
        if old is not None:
            # The same node again (a restart, a reconnect), proven by its key: the newest connection wins.
            self._spawn(self._refuse(old.ws, p.ProtocolError(p.Code.REPLACED, "this node connected again")))
        swarm[node_id] = session
        self.per_address[address] = self.per_address.get(address, 0) + 1
        self.metrics.messages.labels("hello").inc()
        try:
            peers = await self.backend.peers_online(hello.swarm, len(swarm))
        except Unavailable:
            peers = len(swarm)
        declared = self.swarms.get(hello.swarm) if self.swarms is not None else None
        welcome = p.Welcome(node_id=node_id, peers=peers, limits=self._limits, server_version=SERVER_VERSION,
                            manifest=self._manifests.get(hello.swarm),
                            manifest_digest=declared.digest if declared is not None else None,
                            manifest_signer=declared.signer if declared is not None else None,
                            manifest_signature=declared.signature if declared is not None else None,
                            manifest_handovers=(list(declared.handovers) if declared is not None and declared.handovers
                                                else msgspec.UNSET))
        await ws.send(p.encode_bytes(welcome), text=True)
        log.debug("hello from %s in swarm %r", node_id, hello.swarm)
        return session

    async def _expect(self, ws: ServerConnection, kind: type[Any], why: str) -> Any:
        """The next frame, if it is a valid ``kind``; otherwise refuse (error + close) and return None."""
        frame = await ws.recv()
        try:
            msg = self._decode(frame)
            if not isinstance(msg, kind):
                raise p.ProtocolError(p.Code.UNEXPECTED, why)
        except p.ProtocolError as err:
            await self._refuse(ws, err)
            return None
        return msg

    def _admit(self, hello: p.Hello, node_id: str, address: str) -> None:
        token = self.config.token
        if token is not None and not _token_ok(hello.token, token):
            raise p.ProtocolError(p.Code.UNAUTHORIZED, "this relay needs the right token")
        if self.swarms is not None:
            declared = self.swarms.get(hello.swarm)
            if declared is None:
                names = sorted(n for n, e in self.swarms.items() if e.manifest.public)
                raise p.ProtocolError(p.Code.UNAUTHORIZED, f"this relay serves no swarm {hello.swarm!r}"
                                      + (f" (public: {', '.join(names)[:120]})" if names else ""))
            if declared.token is not None and not _token_ok(hello.token, declared.token):
                raise p.ProtocolError(p.Code.UNAUTHORIZED, f"swarm {hello.swarm!r} is private: it needs its token")
        allowed = self.config.allowed_keys
        if allowed is not None and node_id not in allowed:
            raise p.ProtocolError(p.Code.UNAUTHORIZED, f"node {node_id} is not on this relay's list of admitted keys")
        swarm = self.peers.get(hello.swarm)
        if swarm is None and len(self.peers) >= self.config.max_swarms:
            raise p.ProtocolError(p.Code.FULL, "this relay serves as many swarms as it can")
        if (swarm is None or node_id not in swarm) and self.peer_count >= self.config.max_peers:
            raise p.ProtocolError(p.Code.FULL, "this relay has as many peers as it can take")
        cap = self.config.max_peers_per_address
        existing = swarm.get(node_id) if swarm is not None else None
        replaces = existing is not None and existing.address == address  # a reconnect takes its old place
        if cap is not None and not replaces and self.per_address.get(address, 0) >= cap:
            # Keys are free, addresses less so: one machine cannot field a crowd of identities.
            raise p.ProtocolError(p.Code.FULL, f"this relay admits at most {cap} connections per address")

    def _leave(self, session: _Session) -> None:
        left = self.per_address.get(session.address, 0) - 1
        if left > 0:
            self.per_address[session.address] = left
        else:
            self.per_address.pop(session.address, None)
        swarm = self.peers.get(session.swarm)
        if swarm is not None and swarm.get(session.node_id) is session:
            del swarm[session.node_id]
            if not swarm:
                del self.peers[session.swarm]
            self.backend.seen(session.swarm, session.node_id, time.time())  # last seen now

    async def _serve(self, s: _Session) -> None:
        while True:
            frame = await s.ws.recv()
            started = time.perf_counter()
            kind = "refused"
            try:
                self._check_rate(s, frame)
                msg = self._decode(frame)
                kind = _TAGS[type(msg)]
                try:
                    reply = await self._dispatch(s, msg)
                except Unavailable:
                    raise _UNAVAILABLE from None
                self.metrics.messages.labels(kind).inc()
            except p.ProtocolError as err:
                self.metrics.rejections.labels(err.code).inc()
                # The relay's own outage is not the peer's fault: it does not count towards a close.
                if err.code != p.Code.UNAVAILABLE and not s.errors.take(1.0, time.monotonic()):
                    await self._refuse(s.ws, p.ProtocolError(p.Code.ABUSE, "too many refused messages"))
                    return
                reply = p.encode_bytes(err.to_message())
            await s.ws.send(reply, text=True)
            self.metrics.latency.labels(kind).observe(time.perf_counter() - started)

    def _check_rate(self, s: _Session, frame: str | bytes) -> None:
        now = time.monotonic()
        if not (s.messages.take(1.0, now) and s.bytes.take(len(frame), now)):
            raise p.ProtocolError(p.Code.RATE_LIMITED, f"over {self.config.rate_per_s:g} messages/s; slow down")

    @staticmethod
    def _decode(frame: str | bytes) -> p.Message:
        if not isinstance(frame, str):
            raise p.ProtocolError(p.Code.MALFORMED, "binary frames are not accepted; send JSON text")
        return p.decode(frame)

    async def _refuse(self, ws: ServerConnection, err: p.ProtocolError) -> None:
        """Tell the peer why, then close with the code from the protocol's table."""
        self.metrics.rejections.labels(err.code).inc()
        self.metrics.closes.labels(str(err.close_code)).inc()
        with contextlib.suppress(ConnectionClosed):
            await ws.send(p.encode_bytes(err.to_message()), text=True)
        await ws.close(err.close_code, err.close_reason)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- requests (each backend call is atomic: in-process without awaiting, or one Redis script) ---

    async def _dispatch(self, s: _Session, msg: p.Message) -> bytes:
        now = time.time()
        if isinstance(msg, p.Publish):
            return await self._publish(s, msg, now)
        if isinstance(msg, p.Sample):
            payloads = await self.backend.sample(
                s.swarm, s.node_id, msg.n,
                max_age_s=msg.max_age_s, now=now, tasks=msg.tasks, unseen_only=msg.unseen_only,
                max_bytes=p.MAX_FRAME_BYTES - 1024,
            )  # fmt: skip
            self.metrics.groups_out.inc(len(payloads))
            return p.encode_groups(payloads)
        if isinstance(msg, p.StatsRequest):
            reply = await self.backend.stats_reply(s.swarm, s.node_id, now, len(self.peers.get(s.swarm, ())))
            return p.encode_bytes(reply)
        if isinstance(msg, p.Report):
            return await self._report(s, msg, now)
        if isinstance(msg, (p.Hello, p.Auth)):
            raise p.ProtocolError(p.Code.UNEXPECTED, "hello was already said on this connection")
        raise p.ProtocolError(p.Code.UNEXPECTED, f"{_TAGS[type(msg)]} is sent by the relay, not to it")

    async def _publish(self, s: _Session, msg: p.Publish, now: float) -> bytes:
        accepted, rejected = 0, []
        for i, (group, signature) in enumerate(zip(msg.groups, msg.signatures, strict=True)):
            reason = await self._pool_one(s, group, signature, now)
            if reason is None:
                accepted += 1
            else:
                rejected.append(p.Rejection(index=i, reason=reason))
                self.metrics.rejections.labels(reason).inc()
        self.metrics.groups_in.inc(len(msg.groups))
        self.metrics.groups_accepted.inc(accepted)
        if any(r.reason == "bad_signature" for r in rejected) and not s.errors.take(1.0, time.monotonic()):
            # Forged groups cost a signature check each: a sender of many is treated as abusive.
            raise p.ProtocolError(p.Code.ABUSE, "too many groups with bad signatures")
        return p.encode_bytes(p.Ack(accepted=accepted, rejected=rejected))

    async def _pool_one(self, s: _Session, group: p.Group, signature: bytes, now: float) -> str | None:
        """Why one published group is refused, or None once it is pooled. Cheapest checks first."""
        c = self.config
        if (len(group.completions) > c.max_completions or len(group.question) > c.max_question_chars
                or len(group.answer) > c.max_question_chars
                or any(len(t) > c.max_completion_chars for t in group.completions)):
            return "over_limits"
        if not group.has_spread():
            return "zero_advantage"
        if not await self.backend.take_publish_token(s.swarm, s.node_id, now):
            return "rate_limited"
        if not p.authored_by(group, s.node_id):  # a question of another node's stream: a copy (wire.authorship)
            return "not_author"
        if not p.group_signature_ok(s.public_key, signature, s.swarm, group):
            return "bad_signature"
        shared = p.SharedGroup(group=group, node_id=s.node_id, public_key=s.public_key, signature=signature,
                               received_at=now)
        payload = p.encode_bytes(shared)
        if len(payload) > p.MAX_SHARED_GROUP_BYTES:
            return "too_big"
        return await self.backend.publish(s.swarm, s.node_id, group, key=group.spec.key(),
                                          digest=p.group_digest(group), payload=payload, now=now)

    async def _report(self, s: _Session, msg: p.Report, now: float) -> bytes:
        """A signed "round done, trained these": rounds for the sender, adoption for the authors."""
        if not p.report_signature_ok(s.public_key, msg.signature, s.swarm, msg.round, msg.trained):
            raise p.ProtocolError(p.Code.UNAUTHORIZED, "the report's signature does not match this node's key")
        credited = await self.backend.report(s.swarm, s.node_id, msg.round, msg.trained, now)
        self.metrics.adoptions.inc(credited)
        return p.encode_bytes(p.Ack(accepted=credited))


def _token_ok(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def _address(ws: ServerConnection) -> str:
    peer = ws.remote_address
    return str(peer[0]) if isinstance(peer, tuple) and peer else "?"


_UNAVAILABLE = p.ProtocolError(p.Code.UNAVAILABLE, "the relay cannot reach its shared state (Redis) now; "
                                                    "try again shortly or another relay")


def _response(conn: ServerConnection, body: str, content_type: str, status: int = 200) -> Response:
    response = conn.respond(status, body)
    del response.headers["Content-Type"]
    response.headers["Content-Type"] = content_type
    response.headers["Cache-Control"] = "no-store"
    return response
