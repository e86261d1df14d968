"""The status page: one dependency-free HTML document (inline CSS and JS, no CDN, no build step).

The relay serves the same page at ``/`` (the swarms on this relay) and ``/swarm/NAME`` (one swarm);
its script polls ``/api/swarms`` or ``/api/swarm/NAME`` (relay/status.py) and redraws. Every value
is written with ``textContent`` and elements made with ``createElement``, never ``innerHTML``:
model names are chosen by peers. The Content-Security-Policy admits only this exact script (by
its hash), so even a slip there could not run a peer's markup: no inline handlers, no images.
"""

from __future__ import annotations

import base64
import hashlib

POLL_S = 5

SCRIPT = """
"use strict";
const $ = (id) => document.getElementById(id);
const match = location.pathname.match(/^\\/swarm\\/([^/]+)$/);
const swarm = match ? decodeURIComponent(match[1]) : null;
const api = swarm === null ? "/api/swarms" : "/api/swarm/" + encodeURIComponent(swarm);
const every = Math.max(1, Number(new URLSearchParams(location.search).get("every")) || %(poll)d) * 1000;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function fill(tbody, rows) {
  tbody.replaceChildren(...rows.map((cells) => {
    const tr = el("tr");
    for (const c of cells) tr.append(c instanceof Node ? (() => { const td = el("td"); td.append(c); return td; })()
                                                     : el("td", c));
    return tr;
  }));
}
function ago(s) {
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  if (s < 86400) return Math.round(s / 3600) + " h ago";
  return Math.round(s / 86400) + " d ago";
}
function showSwarm(d) {
  $("title").textContent = d.swarm;
  document.title = d.swarm + " \\u00b7 SAPO Swarm";
  $("peers").textContent = d.peers_online;
  $("gpm").textContent = d.groups_per_minute;
  $("pool").textContent = d.pool_groups;
  $("models").replaceChildren(...d.models.map((m) => el("li", m.model + " \\u00d7 " + m.peers)));
  $("models-box").hidden = d.models.length === 0;
  fill($("board").tBodies[0], d.leaderboard.map((r, i) => {
    const name = el("span", r.name, "name");
    name.title = r.node_id;
    const seen = el("span", r.online ? "online" : ago(r.last_seen_s), r.online ? "ok" : "");
    return [i + 1, name, r.points, r.shared, r.adopted, r.rounds, seen];
  }));
  $("empty").hidden = d.leaderboard.length > 0;
}
function showRelay(d) {
  $("peers").textContent = d.peers_online;
  $("swarms-count").textContent = d.swarms_online;
  fill($("swarms").tBodies[0], d.swarms.map((s) => {
    const a = el("a", s.swarm);
    a.href = "/swarm/" + encodeURIComponent(s.swarm);
    return [a, s.peers_online, s.groups_per_minute];
  }));
  $("empty").hidden = d.swarms.length > 0;
  const pub = d.public || [];
  fill($("public").tBodies[0], pub.map((s) => {
    const a = el("a", s.swarm);
    a.href = "/swarm/" + encodeURIComponent(s.swarm);
    // The operator's manifest key, as an invite pins it: its first 16 hex digits here, all 64 on hover.
    const signer = s.signer ? el("span", s.signer.slice(0, 16) + "\u2026", "name") : el("span", "not signed", "bad");
    // A key the operator handed over to (sapo-relay handover): the keys it replaced, oldest first, on hover too.
    const handed = (s.handovers || []).map((h) => h.old);
    if (s.signer) signer.title = s.signer + (handed.length ? "\\nreplaces " + handed.join(", then ") : "");
    if (handed.length) signer.textContent += handed.length === 1 ? " (replaces an older key)"
                                                                  : ` (replaces ${handed.length} older keys)`;
    return [a, s.description, s.tasks.join("; "), s.models.join(", "), signer, s.peers_online, s.groups_per_minute];
  }));
  $("public-box").hidden = pub.length === 0;
}
async function poll() {
  try {
    const r = await fetch(api, {cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    const d = await r.json();
    (swarm === null ? showRelay : showSwarm)(d);
    $("state").textContent = "updated " + new Date(d.time * 1000).toLocaleTimeString();
    $("state").className = "ok";
    document.body.dataset.loaded = "1";
  } catch (e) {
    $("state").textContent = "relay unreachable (" + e.message + "), retrying";
    $("state").className = "bad";
  }
  setTimeout(poll, every);
}
for (const n of document.querySelectorAll(swarm === null ? ".swarm-only" : ".relay-only")) n.hidden = true;
if (swarm !== null) $("title").textContent = swarm;
poll();
""" % {"poll": POLL_S}

STYLE = """
:root { color-scheme: light dark; --fg: #1d2330; --muted: #667085; --bg: #f6f7f9; --card: #fff; --line: #e3e6ec;
        --accent: #2f6fed; --ok: #12805c; --bad: #c4320a; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6e8ee; --muted: #98a2b3; --bg: #11151c; --card: #1a2029; --line: #2a313c; --accent: #7aa2ff; }
}
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); }
main { max-width: 56rem; margin: 0 auto; padding: 1rem; }
header { display: flex; flex-wrap: wrap; align-items: baseline; gap: .25rem 1rem; margin-bottom: 1rem; }
h1 { font-size: 1.4rem; margin: 0; overflow-wrap: anywhere; }
h2 { font-size: 1rem; margin: 0 0 .5rem; color: var(--muted); font-weight: 600; }
.sub { color: var(--muted); font-size: .9rem; }
.tiles { display: grid; grid-template-columns: repeat(auto-fit, minmax(9rem, 1fr)); gap: .75rem; margin-bottom: 1rem; }
.tile, section { background: var(--card); border: 1px solid var(--line); border-radius: .6rem; padding: .8rem 1rem; }
section { margin-bottom: 1rem; overflow-x: auto; }
.tile b { display: block; font-size: 1.8rem; font-variant-numeric: tabular-nums; }
.tile span { color: var(--muted); font-size: .85rem; }
table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { text-align: right; padding: .35rem .5rem; border-bottom: 1px solid var(--line); white-space: nowrap; }
th:nth-child(2), td:nth-child(2), #swarms th:first-child, #swarms td:first-child { text-align: left; }
th { color: var(--muted); font-weight: 600; font-size: .85rem; }
.name { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .9rem; }
ul { margin: 0; padding-left: 1.2rem; overflow-wrap: anywhere; }
a { color: var(--accent); }
.ok { color: var(--ok); } .bad { color: var(--bad); }
@media (max-width: 30rem) { main { padding: .5rem; } section, .tile { padding: .6rem; }
  .tiles { grid-template-columns: repeat(3, 1fr); gap: .4rem; }
  .tile b { font-size: 1.3rem; } .tile span { font-size: .75rem; }
  th, td { padding: .3rem .2rem; font-size: .85rem; } .name { font-size: .8rem; } #board th:nth-child(6), #board td:nth-child(6) { display: none; } }
"""

HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>SAPO Swarm relay</title>
<style>%(style)s</style>
</head>
<body>
<main>
<header>
  <h1 id="title">SAPO Swarm relay</h1>
  <span class="sub swarm-only"><a href="/">all swarms on this relay</a></span>
  <span class="sub" id="state">loading\u2026</span>
</header>
<div class="tiles">
  <div class="tile"><b id="peers">\u2013</b><span>peers online</span></div>
  <div class="tile swarm-only"><b id="gpm">\u2013</b><span>groups shared in the last minute</span></div>
  <div class="tile swarm-only"><b id="pool">\u2013</b><span>groups in the pool</span></div>
  <div class="tile relay-only"><b id="swarms-count">\u2013</b><span>swarms with peers online</span></div>
</div>
<section class="swarm-only">
  <h2>Leaderboard</h2>
  <table id="board">
    <thead><tr><th>#</th><th>node</th><th>points</th><th>shared</th><th>adopted</th><th>rounds</th><th>seen</th></tr></thead>
    <tbody></tbody>
  </table>
</section>
<section class="relay-only">
  <h2>Swarms</h2>
  <table id="swarms">
    <thead><tr><th>swarm</th><th>peers online</th><th>groups / min</th></tr></thead>
    <tbody></tbody>
  </table>
</section>
<section class="relay-only" id="public-box" hidden>
  <h2>Public swarms: join one with <code>sapo-engine run --join LINK</code> (ask the operator for the link)</h2>
  <table id="public">
    <thead><tr><th>swarm</th><th>about</th><th>tasks</th><th>suggested models</th><th>rules signed by</th>
    <th>peers online</th><th>groups / min</th></tr></thead>
    <tbody></tbody>
  </table>
</section>
<p class="sub" id="empty" hidden>No nodes here yet.</p>
<section class="swarm-only" id="models-box" hidden>
  <h2>Models online</h2>
  <ul id="models"></ul>
</section>
<p class="sub"><b>points</b>: 10 for each group other nodes trained on, plus 1 a round trained, up to one per such
group; <b>shared</b>: groups a node published to the swarm; <b>adopted</b>: of those, how many other nodes
trained on (each receiver counted once); <b>rounds</b>: training rounds the node completed. <b>rules signed
by</b>: the key the operator signs each public swarm's rules with; an invite that names it makes a node follow
only rules that key signed.</p>
</main>
<script>%(script)s</script>
</body>
</html>
""" % {"style": STYLE, "script": SCRIPT}

_SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()

# Only this page's own script and style run; fetches go to this origin only; nothing is framed or loaded.
CSP = ("default-src 'none'; "
       f"script-src 'sha256-{_SCRIPT_HASH}'; "
       "style-src 'unsafe-inline'; "
       "connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
