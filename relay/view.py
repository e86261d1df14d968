"""What the metrics and the status page read from a running relay, and nothing more.

``relay.server.Relay`` satisfies ``RelayView`` structurally (it never names it), so
``relay/metrics.py`` and ``relay/status.py`` depend on this small description instead of on the
server that imports them: every import in relay/ runs one way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from relay.backend import Backend


class PeerView(Protocol):
    """One admitted connection, as the status page shows it."""

    @property
    def model(self) -> str: ...  # as the peer announced it: shown as text only


class RelayView(Protocol):
    """A relay's own connections and its backend's read-only views."""

    @property
    def backend(self) -> Backend: ...

    @property
    def peers(self) -> Mapping[str, Mapping[str, PeerView]]: ...  # swarm -> node_id -> connection

    @property
    def peer_count(self) -> int: ...
