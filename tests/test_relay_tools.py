"""The fuzzer and the load generator, run small."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from relay.pool import PoolLimits
from relay.server import Relay, RelayConfig
from tools.relay_fuzz import fuzz
from tools.relay_loadgen import main as loadgen_main

SCALE = float(os.environ.get("SAPO_TEST_TIMEOUT_SCALE", "1"))


def test_fuzz_small_run_keeps_relay_serving(tmp_path: Path) -> None:
    async def scenario() -> None:
        config = RelayConfig(data_dir=tmp_path, port=0, rate_per_s=1e6, burst=10**6, bytes_per_s=1e10,
                             pool=PoolLimits(groups_per_minute=10**6))
        async with Relay(config) as r:
            tally, served, failures, _ = await fuzz(f"ws://127.0.0.1:{r.port}", 400, 3, seed=7, deadline_s=5 * SCALE)
            assert failures == []
            assert served > 0
            assert sum(tally.sent.values()) == 400
            assert r.metrics.crashes._value.get() == 0

    asyncio.run(asyncio.wait_for(scenario(), 60 * SCALE))


def test_loadgen_small_run(capsys) -> None:  # type: ignore[no-untyped-def]
    assert loadgen_main(["--spawn", "--nodes", "4", "--seconds", "1", "--rate", "40"]) == 0
    out = capsys.readouterr().out
    assert "msg/s sustained" in out and "relay RSS" in out and "exit code 0" in out
