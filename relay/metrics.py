"""The relay's Prometheus metrics, in a registry of its own (tests run several relays in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

from relay.view import RelayView


class Metrics:
    """Prometheus metrics in a registry of this relay's own (tests run several relays)."""

    def __init__(self, relay: RelayView) -> None:
        self.registry = r = CollectorRegistry()
        Gauge("sapo_relay_peers", "Nodes connected (after hello)", registry=r).set_function(lambda: relay.peer_count)
        Gauge("sapo_relay_swarms", "Swarms with connected nodes", registry=r).set_function(lambda: len(relay.peers))
        # With Redis these are swarm-wide (every replica's groups), read once a second.
        Gauge("sapo_relay_pool_groups", "Groups in the pool", registry=r).set_function(
            lambda: relay.backend.pool_groups)
        Gauge("sapo_relay_pool_bytes", "Pool size in bytes", registry=r).set_function(lambda: relay.backend.pool_bytes)
        Gauge("sapo_relay_backend_up", "1 while the pool and stats (embedded or Redis) can be reached",
              registry=r).set_function(lambda: 1 if relay.backend.healthy else 0)
        self.connections = Counter("sapo_relay_connections", "WebSocket connections opened", registry=r)
        self.messages = Counter("sapo_relay_messages", "Valid messages received, by type", ["type"], registry=r)
        self.groups_in = Counter("sapo_relay_groups_received", "Groups published", registry=r)
        self.groups_accepted = Counter("sapo_relay_groups_accepted", "Groups put in the pool", registry=r)
        self.groups_out = Counter("sapo_relay_groups_sent", "Groups sent out in samples", registry=r)
        self.adoptions = Counter("sapo_relay_adoptions", "Groups credited as trained by a receiver", registry=r)
        self.rejections = Counter(
            "sapo_relay_rejections", "Refused frames (error code) and groups (reason)", ["reason"], registry=r
        )
        self.closes = Counter("sapo_relay_error_closes", "Connections the relay closed, by code", ["code"], registry=r)
        self.crashes = Counter("sapo_relay_handler_crashes", "Handlers that raised (closed with 1011)", registry=r)
        self.latency = Histogram(
            "sapo_relay_request_seconds",
            "Time from receiving a request to sending its reply",
            ["type"],
            buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        self.loop_lag = Histogram(
            "sapo_relay_loop_lag_seconds",
            "Event-loop wake-up delay (sampled 20 times a second)",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        # process_resident_memory_bytes, process_cpu_seconds_total, open fds (Linux): per replica, beside the rest.
        ProcessCollector(registry=r)
        for kind in ("hello", "publish", "sample", "stats", "report", "refused"):
            self.latency.labels(kind)  # show every series from the start, at zero
