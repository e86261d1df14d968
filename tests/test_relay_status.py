"""The status page on a real relay with real signed clients; its numbers against /metrics; in a real browser.

The browser tests drive Debian's ``chromium`` headless (tests/chromium.py): the page's own script
polls the JSON and draws it, and the DOM it leaves is compared with what ``/metrics`` says.
"""

from __future__ import annotations

import asyncio
import json
import random
import struct
import urllib.error
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import chromium
from relay.server import Relay, RelayConfig
from tools.relay_loadgen import SimNode, http_get, spawn_relay, synthetic_group
from wire import protocol as p
from wire.points import points

HOSTILE = "<img src=x onerror=\"document.title='pwned'\"><script>document.title='pwned'</script>&amp;"


def metrics(base: str) -> dict[str, float]:
    values = {}
    for family in text_string_to_metric_families(http_get(base + "/metrics")):
        for sample in family.samples:
            if not sample.labels:
                values[sample.name] = sample.value
    return values


async def populate(url: str, swarm: str, sizes: list[int], models: list[str] | None = None,
                   seed: int = 7) -> list[SimNode]:
    """Nodes that publish ``sizes[i]`` groups each; the first samples everyone's and reports them trained."""
    rng = random.Random(seed)
    nodes = [SimNode(url, swarm=swarm, model=(models or ["SmolLM2-135M-Instruct"])[i % len(models or [1])])
             for i in range(len(sizes))]
    for node in nodes:
        assert isinstance(await node.connect(), p.Welcome)
    for node, n in zip(nodes, sizes):
        if n:
            ack = await node.request(node.publish_message(*[synthetic_group(rng, round_=1) for _ in range(n)]))
            assert isinstance(ack, p.Ack) and ack.accepted == n
    got = await nodes[0].request(p.Sample(n=p.MAX_SAMPLE_N))
    assert isinstance(got, p.Groups)
    trained = [s.group for s in got.groups]
    ack = await nodes[0].request(nodes[0].report_message(1, *trained))
    assert isinstance(ack, p.Ack) and ack.accepted == len(trained)
    return nodes


@pytest.fixture
def relay(tmp_path: Path):
    r = spawn_relay([], tmp_path)
    yield r
    r.stop()


def test_json_numbers_match_metrics(relay) -> None:
    async def run() -> None:
        nodes = await populate(relay.url, "demo", [2, 3, 1, 0])
        other = await populate(relay.url, "other", [1, 1])
        try:
            status = json.loads(await asyncio.to_thread(http_get, relay.http + "/api/swarm/demo"))
            overview = json.loads(await asyncio.to_thread(http_get, relay.http + "/api/swarms"))
            m = await asyncio.to_thread(metrics, relay.http)
        finally:
            for n in nodes + other:
                await n.close()
        assert status["swarm"] == "demo" and status["peers_online"] == 4
        assert m["process_resident_memory_bytes"] > 0 and m["process_open_fds"] >= 6  # per-replica process figures
        assert overview["peers_online"] == m["sapo_relay_peers"] == 6
        assert overview["swarms_online"] == m["sapo_relay_swarms"] == 2
        assert [s["swarm"] for s in overview["swarms"]] == ["demo", "other"]  # busiest first
        board = status["leaderboard"]
        accepted = m["sapo_relay_groups_accepted_total"]
        assert status["groups_per_minute"] + overview["swarms"][1]["groups_per_minute"] == accepted == 8
        assert sum(r["shared"] for r in board) == status["groups_per_minute"] == status["pool_groups"] == 6
        assert [r["points"] for r in board] == [31, 11, 0, 0]  # wire/points.py: 10 per adopted group + 1 a round
        assert sum(r["adopted"] for r in board) + 1 == m["sapo_relay_adoptions_total"] == 5  # 1 in "other"
        assert [r["shared"] for r in board] == [3, 1, 2, 0]  # by adopted (3, 1, 0, 0), then shared
        assert all(r["online"] for r in board) and status["models"] == [{"model": "SmolLM2-135M-Instruct", "peers": 4}]
        assert {r["node_id"] for r in board} == {n.node_id for n in nodes}
        assert {r["name"] for r in board} == {n.name for n in nodes}

    asyncio.run(run())


def test_points_come_only_from_groups_others_trained(relay) -> None:
    """A node that claims many rounds and shares groups nobody trains earns nothing; one whose group another
    node trained leads the leaderboard, however little it claims."""

    async def run() -> None:
        rng = random.Random(3)
        spammer, helper, learner = (SimNode(relay.url, swarm="pts") for _ in range(3))
        try:
            for node in (spammer, helper, learner):
                assert isinstance(await node.connect(), p.Welcome)
            ack = await spammer.request(spammer.publish_message(*[synthetic_group(rng, round_=1) for _ in range(4)]))
            assert isinstance(ack, p.Ack) and ack.accepted == 4
            for rnd in range(1, 41):  # forty rounds claimed, nothing trained from anyone
                await asyncio.sleep(0.06)  # within the relay's 20 messages/s per connection
                assert isinstance(await spammer.request(spammer.report_message(rnd)), p.Ack)
            shared = synthetic_group(rng, round_=1)
            assert isinstance(await helper.request(helper.publish_message(shared)), p.Ack)
            got = await learner.request(p.Sample(n=p.MAX_SAMPLE_N))
            mine = [s.group for s in got.groups if s.node_id == helper.node_id]
            assert len(mine) == 1
            assert isinstance(await learner.request(learner.report_message(1, *mine)), p.Ack)
            status = json.loads(await asyncio.to_thread(http_get, relay.http + "/api/swarm/pts"))
        finally:
            for node in (spammer, helper, learner):
                await node.close()
        by_node = {r["node_id"]: r for r in status["leaderboard"]}
        assert by_node[spammer.node_id]["rounds"] == 40 and by_node[spammer.node_id]["points"] == 0
        assert by_node[helper.node_id]["adopted"] == 1 and by_node[helper.node_id]["points"] == 11
        assert status["leaderboard"][0]["node_id"] == helper.node_id
        assert by_node[learner.node_id]["points"] == 0  # training others' groups is its own reward, not points

    asyncio.run(run())


def test_unknown_swarms_cost_nothing_and_bad_paths_are_404(tmp_path: Path) -> None:
    async def run() -> None:
        async with Relay(RelayConfig(data_dir=tmp_path, port=0)) as relay:
            base = f"http://127.0.0.1:{relay.port}"
            empty = json.loads(await asyncio.to_thread(http_get, base + "/api/swarm/nobody-here"))
            assert empty["peers_online"] == 0 and empty["leaderboard"] == [] and empty["pool_groups"] == 0
            assert relay.stats is not None and not relay.stats.has_swarm("nobody-here")  # nothing loaded or kept
            for bad in ("/api/swarm/%3Cimg%3E", "/api/swarm/", "/swarm/a/b", "/api/nothing", "/swarm/" + "x" * 65):
                with pytest.raises(urllib.error.HTTPError) as err:
                    await asyncio.to_thread(http_get, base + bad)
                assert err.value.code == 404, bad
            # A node still connects at "/", where browsers get the page.
            async with SimNode(f"ws://127.0.0.1:{relay.port}", swarm="s") as node:
                assert isinstance(await node.connect(), p.Welcome)

    asyncio.run(run())


def test_page_headers_and_switch_off(tmp_path: Path) -> None:
    async def run() -> None:
        async with Relay(RelayConfig(data_dir=tmp_path / "a", port=0)) as relay:
            base = f"http://127.0.0.1:{relay.port}"
            import urllib.request

            for path in ("/", "/swarm/demo"):
                with await asyncio.to_thread(urllib.request.urlopen, base + path, None, 5) as resp:
                    body = resp.read().decode()
                    assert resp.headers["Content-Type"].startswith("text/html")
                    csp = resp.headers["Content-Security-Policy"]
                    assert "script-src 'sha256-" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
                    assert resp.headers["X-Content-Type-Options"] == "nosniff"
                assert '<meta name="viewport" content="width=device-width' in body
                assert "innerHTML" not in body and "http://" not in body and "https://" not in body  # no CDN
        async with Relay(RelayConfig(data_dir=tmp_path / "b", port=0, status_page=False)) as relay:
            base = f"http://127.0.0.1:{relay.port}"
            for path in ("/", "/swarm/demo", "/api/swarms", "/api/swarm/demo"):
                with pytest.raises(urllib.error.HTTPError) as err:
                    await asyncio.to_thread(http_get, base + path)
                assert err.value.code == 404
            assert json.loads(await asyncio.to_thread(http_get, base + "/healthz"))["status"] == "ok"

    asyncio.run(run())


# --- in a real browser -----------------------------------------------------------------------


def test_page_in_chromium_shows_what_metrics_say(relay) -> None:
    browser = chromium.require()

    async def run() -> None:
        nodes = await populate(relay.url, "demo", [2, 3, 1, 0], models=["SmolLM2-135M-Instruct", "gemma-3-270m"])
        try:
            swarm_dom = chromium.Dom(await asyncio.to_thread(chromium.dump_dom, browser, relay.http + "/swarm/demo"))
            relay_dom = chromium.Dom(await asyncio.to_thread(chromium.dump_dom, browser, relay.http + "/"))
            m = await asyncio.to_thread(metrics, relay.http)
        finally:
            for n in nodes:
                await n.close()
        d = swarm_dom
        assert d.text["state"].startswith("updated"), d.text["state"]  # the script ran and its fetch succeeded
        assert int(d.text["peers"]) == m["sapo_relay_peers"] == 4
        assert int(d.text["gpm"]) == m["sapo_relay_groups_accepted_total"] == 6
        assert int(d.text["pool"]) == m["sapo_relay_pool_groups"] == 6
        rows = d.rows["board"][1:]  # after the header
        assert [r[1] for r in rows] == [nodes[1].name, nodes[2].name, nodes[0].name, nodes[3].name]
        assert [int(r[2]) for r in rows] == [points(int(r[4]), int(r[5])) for r in rows] == [31, 11, 0, 0]
        assert sum(int(r[3]) for r in rows) == m["sapo_relay_groups_accepted_total"]
        assert sum(int(r[4]) for r in rows) == m["sapo_relay_adoptions_total"] == 4
        assert [r[6] for r in rows] == ["online"] * 4
        assert "gemma-3-270m \u00d7 2" in d.text["models"] and "SmolLM2-135M-Instruct \u00d7 2" in d.text["models"]
        o = relay_dom
        assert o.text["title"] == "SAPO Swarm relay" and int(o.text["peers"]) == 4 and o.text["swarms-count"] == "1"
        assert o.rows["swarms"][1] == ["demo", "4", "6"]
        assert ("a", {"href": "/swarm/demo"}) in o.tags

    asyncio.run(run())


def test_hostile_model_name_stays_text_in_chromium(relay) -> None:
    browser = chromium.require()

    async def run() -> None:
        nodes = await populate(relay.url, "demo", [1, 1], models=[HOSTILE])
        try:
            html = await asyncio.to_thread(chromium.dump_dom, browser, relay.http + "/swarm/demo")
        finally:
            for n in nodes:
                await n.close()
        dom = chromium.Dom(html)
        assert dom.text["state"].startswith("updated")
        assert HOSTILE[:40] in dom.text["models"]  # shown, as text (cut to 48 characters by the relay)
        assert not [t for t, _ in dom.tags if t == "img"]  # no element made from it
        assert sum(1 for t, _ in dom.tags if t == "script") == 1  # only the page's own
        assert "pwned" not in dom.text.get("title", "") and "<title>pwned" not in html
        assert "&lt;img src=x" in html  # serialized escaped: it is a text node

    asyncio.run(run())


def test_screenshots_desktop_and_phone(relay, tmp_path: Path) -> None:
    browser = chromium.require()

    async def run() -> None:
        nodes = await populate(relay.url, "demo", [4, 2, 3, 1, 0])
        try:
            for name, width, height in (("desktop", 1100, 900), ("phone", 390, 844)):
                out = await asyncio.to_thread(chromium.screenshot, browser, relay.http + "/swarm/demo",
                                              tmp_path / f"{name}.png", width=width, height=height)
                head = out.read_bytes()[:24]
                assert head[:8] == b"\x89PNG\r\n\x1a\n"
                assert struct.unpack(">II", head[16:24]) == (width, height)
        finally:
            for n in nodes:
                await n.close()

    asyncio.run(run())


def test_page_updates_itself_as_the_swarm_changes(relay) -> None:
    """The page polls: new groups and a node leaving show up without a reload (chromium, DevTools)."""
    browser = chromium.require()

    async def run() -> None:
        nodes = await populate(relay.url, "demo", [2, 3, 1, 0])
        try:
            with chromium.LivePage(browser, relay.http + "/swarm/demo?every=1") as page:
                await asyncio.to_thread(page.wait_text, "gpm", "6")
                assert page.text("peers") == "4"
                late = nodes[3]
                rng = random.Random(99)
                ack = await late.request(late.publish_message(*[synthetic_group(rng) for _ in range(2)]))
                assert isinstance(ack, p.Ack) and ack.accepted == 2
                await asyncio.to_thread(page.wait_text, "gpm", "8")
                await asyncio.to_thread(page.wait_text, "pool", "8")
                await nodes[0].close()
                await asyncio.to_thread(page.wait_text, "peers", "3")
                m = await asyncio.to_thread(metrics, relay.http)
                assert page.text("peers") == str(int(m["sapo_relay_peers"]))
                assert page.text("gpm") == str(int(m["sapo_relay_groups_accepted_total"]))
        finally:
            for n in nodes:
                await n.close()

    asyncio.run(run())
