"""The node's side of the relay: connect, publish, sample, stats. Never takes the node down.

Synchronous on purpose: the round loop is synchronous (torch, llama.cpp), and
``websockets``' sync client answers the relay's keepalive pings from its own background
thread while the node trains. Every request has a timeout; any failure marks the client
disconnected and the node carries on with local groups. Reconnects back off
exponentially (1 s doubling to 60 s, with jitter) and are attempted at most once a round.

Refusals that retrying cannot fix (wrong token, another protocol version) are raised as
``SapoError`` on the first connection, so a misconfigured node stops with a clear line
instead of training alone forever.
"""

from __future__ import annotations

import random
import time
from typing import Callable
from urllib.parse import urlsplit

from websockets.exceptions import InvalidURI, WebSocketException
from websockets.sync.client import ClientConnection, connect

from engine.errors import SapoError, first_line
from wire.protocol import (MAX_FRAME_BYTES, Ack, Code, Error, Group, Groups, Hello, ProtocolError, Publish, Report,
                            Sample, ServerMessage, SharedGroup, StatsReply, StatsRequest, Welcome, decode,
                            display_name, encode)

CLIENT_VERSION = "sapo-engine/0.1"
FATAL = (Code.UNAUTHORIZED, Code.VERSION)


def check_relay_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise SapoError(f"relay URL must look like ws://host:port or wss://host:port, got {url!r}")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise SapoError(f"relay URL has an invalid port: {url!r}") from None
    return url


class SwarmClient:
    def __init__(self, url: str, swarm: str, node_id: str, model: str, token: str | None,
                 on_status: Callable[[str], None], timeout_s: float = 10.0) -> None:
        self.url = check_relay_url(url)
        self.hello = Hello(swarm=swarm, node_id=node_id, name=display_name(node_id), model=model[:128],
                           client_version=CLIENT_VERSION, token=token)
        self.on_status = on_status
        self.timeout_s = timeout_s
        self.ws: ClientConnection | None = None
        self.peers = 0
        self._backoff = 1.0
        self._next_try = 0.0
        self._ever_connected = False
        self._first_attempt = True

    @property
    def connected(self) -> bool:
        return self.ws is not None

    def ensure_connected(self) -> bool:
        if self.ws is not None:
            return True
        if time.monotonic() < self._next_try:
            return False
        first, self._first_attempt = self._first_attempt, False
        try:
            ws = connect(self.url, max_size=MAX_FRAME_BYTES, open_timeout=self.timeout_s, close_timeout=2)
        except (OSError, TimeoutError, WebSocketException, InvalidURI) as exc:
            self._retry_later(f"relay {self.url} unreachable ({first_line(exc, 120)})")
            return False
        self.ws = ws
        reply = self._request(self.hello)
        if isinstance(reply, Error) and reply.code in FATAL and first:
            raise SapoError(f"relay {self.url} refused this node: {reply.reason}")
        if not isinstance(reply, Welcome):
            self._drop(f"relay {self.url} did not welcome this node" + (f": {reply.reason}" if isinstance(reply, Error) else ""))
            return False
        self.peers = reply.peers
        self._backoff = 1.0
        self.on_status(f"{'re' if self._ever_connected else ''}connected to relay {self.url}, swarm "
                       f"{self.hello.swarm!r}, {reply.peers} peers online")
        self._ever_connected = True
        return True

    def _retry_later(self, why: str) -> None:
        delay = self._backoff * random.uniform(0.8, 1.2)
        self._next_try = time.monotonic() + delay
        self._backoff = min(self._backoff * 2, 60.0)
        self.on_status(f"{why}; training on local groups, retrying in {delay:.0f}s")

    def _drop(self, why: str) -> None:
        ws, self.ws = self.ws, None
        if ws is not None:
            try:
                ws.close()
            except Exception:  # noqa: BLE001 - already broken; nothing more to do
                pass
        self._retry_later(why)

    def _request(self, msg: Hello | Publish | Sample | StatsRequest | Report) -> ServerMessage | None:
        """Send one message and read its one reply; None (and disconnected) on any failure."""
        if self.ws is None:
            return None
        try:
            self.ws.send(encode(msg))
            frame = self.ws.recv(timeout=self.timeout_s)
            return decode(frame)  # type: ignore[return-value]
        except ProtocolError as exc:
            self._drop(f"relay sent a frame we refuse ({exc.code})")
        except (OSError, TimeoutError, WebSocketException) as exc:
            self._drop(f"lost the relay ({first_line(exc, 120)})")
        return None

    # --- requests ---
    def publish(self, groups: list[Group]) -> Ack | None:
        if not groups or not self.ensure_connected():
            return None
        reply = self._request(Publish(groups=groups[:32]))
        return reply if isinstance(reply, Ack) else None

    def sample(self, n: int, tasks: list[str] | None, max_age_s: float = 600.0) -> list[SharedGroup]:
        if n <= 0 or not self.ensure_connected():
            return []
        reply = self._request(Sample(n=min(n, 64), tasks=tasks[:32] if tasks else None, max_age_s=max_age_s))
        return list(reply.groups) if isinstance(reply, Groups) else []

    def report(self, round_: int) -> None:
        if self.ws is not None:
            self._request(Report(round=round_))

    def stats(self) -> StatsReply | None:
        if not self.ensure_connected():
            return None
        reply = self._request(StatsRequest())
        if isinstance(reply, StatsReply):
            self.peers = reply.peers_online
            return reply
        return None

    def close(self) -> None:
        ws, self.ws = self.ws, None
        if ws is not None:
            try:
                ws.close()
            except Exception:  # noqa: BLE001
                pass
