"""A relay written for tests: a tiny websockets server on 127.0.0.1 that speaks the protocol's frames and
says whatever a test wants, which a real relay never would (forged groups, mangled manifest signatures).

It admits anyone (any auth), welcomes with ``welcome`` (extra fields of ``Welcome``), records each hello,
and answers every later frame with ``answer(hello, node_id, message)``; the default answers are bland:
no groups, an ``Ack`` of what was published, a one-row leaderboard.
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve

from wire import protocol as p
from wire.identity import node_id_for

LIMITS = p.Limits(p.MAX_FRAME_BYTES, 32, 64, 32, 64, 16_384, 16_384, 600, 500, 3600.0, 20.0, 40)


class FakeRelay:
    def __init__(self, server_version: str = "fake/1", **welcome: Any) -> None:
        self.welcome = welcome
        self.server_version = server_version
        self.hellos: list[p.Hello] = []
        self.server = serve(self._handle, "127.0.0.1", 0, max_size=p.MAX_FRAME_BYTES)
        self.url = f"ws://127.0.0.1:{self.server.socket.getsockname()[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeRelay:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.thread.join(10)

    def _handle(self, ws: ServerConnection) -> None:
        try:
            hello = p.decode(ws.recv())
            assert isinstance(hello, p.Hello)
            self.hellos.append(hello)
            ws.send(p.encode(p.Challenge(nonce=secrets.token_bytes(32))))
            p.decode(ws.recv())  # whatever the auth, this relay welcomes it
            me = node_id_for(hello.public_key)
            ws.send(p.encode(p.Welcome(node_id=me, peers=2, limits=LIMITS, server_version=self.server_version,
                                       **self.welcome)))
            while True:
                ws.send(p.encode(self.answer(hello, me, p.decode(ws.recv()))))
        except ConnectionClosed:
            pass

    def answer(self, hello: p.Hello, me: str, msg: Any) -> p.Message:
        if isinstance(msg, p.Sample):
            return p.Groups(groups=[])
        if isinstance(msg, (p.Publish, p.Report)):
            return p.Ack(accepted=len(msg.groups) if isinstance(msg, p.Publish) else 0)
        row = p.LeaderboardRow(me, 0, 0, 0, 0.0, 0.0)
        return p.StatsReply(peers_online=2, groups_per_minute=0.0, leaderboard=[row], you=row)
