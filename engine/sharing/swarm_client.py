"""The node's side of the relay: connect, publish, sample, stats. Never takes the node down.

Synchronous on purpose: the round loop is synchronous (torch, llama.cpp), and
``websockets``' sync client answers the relay's keepalive pings from its own background
thread while the node trains. Every request has a timeout; any failure marks the client
disconnected and the node carries on with local groups. Reconnects back off
exponentially (1 s doubling to 60 s, with jitter) and are attempted at most once a round.
Given several relay URLs (replicas of one swarm, comma-separated), each failure moves on to the
next URL, so a node whose relay died is back on another one at its next retry.

The node proves its identity at every connection (it signs the relay's challenge), signs each
group it publishes and each report of the groups it trained, and stays within the limits the
relay announced in its welcome. Groups received are screened (``screen``: signature, own, authorship,
replay, copy) before the node looks at them.

Refusals that retrying cannot fix (wrong token, bad key, another protocol version) are raised as
``SapoError`` on the first connection, so a misconfigured node stops with a clear line
instead of training alone forever.
"""

from __future__ import annotations

import hashlib
import random
import socket
import ssl
import time
from collections import OrderedDict
from typing import Callable

from websockets.exceptions import InvalidMessage, InvalidURI, WebSocketException
from websockets.sync.client import ClientConnection, connect

from engine.errors import SapoError, first_line
from wire import events as ev
from wire.addresses import relay_url_problem, relay_urls_problem, split_relay_urls
from wire.identity import Identity
from wire.manifest import (Manifest, decode_manifest, handover_chain, manifest_changes, manifest_digest,
                           manifest_signature_ok, mix_summary, signer_changes, signer_hex)
from wire.protocol import (MAX_FRAME_BYTES, MAX_NAME_CHARS, Ack, Auth, Challenge, Code, Error, Group, Groups, Hello,
                           Limits, ProtocolError, Publish, Report, Sample, ServerMessage, SharedGroup, StatsReply,
                           StatsRequest, Welcome, authored_by, decode, encode, group_digest, shared_group_ok,
                           sign_challenge, sign_group, sign_report)

CLIENT_VERSION = "sapo-engine/0.2"
FATAL = (Code.UNAUTHORIZED, Code.VERSION)
TRAINED_MEMORY = 20_000  # digests of groups trained or published here: a replay or copy is skipped, not retrained


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """Verifies a wss:// relay's certificate against ``ca_file`` (a private CA), else the system's CAs."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except FileNotFoundError:
        raise SapoError(f"relay CA file not found: {ca_file}") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise SapoError(f"relay CA file {ca_file} is not a PEM CA certificate ({first_line(exc, 80)})") from None


def check_relay_url(url: str) -> str:
    """``url`` if it can address a relay (the rule is ``wire.addresses``'), else a one-line SapoError."""
    if (problem := relay_url_problem(url)) is not None:
        raise SapoError(problem)
    return url


def check_relay_urls(text: str) -> list[str]:
    """One or more relay URLs, comma-separated (replicas sharing one swarm), each checked; in order, once each."""
    if (problem := relay_urls_problem(text)) is not None:
        raise SapoError(problem)
    return split_relay_urls(text)


class SwarmClient:
    def __init__(self, url: str, swarm: str, identity: Identity, model: str, token: str | None,
                 on_status: Callable[[str], None], timeout_s: float = 10.0, ca_file: str | None = None,
                 on_link: Callable[[ev.Relay], object] | None = None,
                 on_manifest: Callable[[ev.SwarmManifest], object] | None = None,
                 ca_sha256: str | None = None) -> None:
        self.urls = check_relay_urls(url)
        self.url = self.urls[0]  # the one in use (or tried next)
        tls = any(u.strip().startswith("wss://") for u in url.split(","))
        if ca_file is not None and not tls:
            # Harmless (the app's "local swarm" is ws://127.0.0.1 while node.toml may keep a CA file), but said.
            on_status(f"relay CA file {ca_file} not used: relay {url} is ws:// (no TLS)")
        # wss:// always verifies the relay's certificate and name: against ca_file, else the system's CAs.
        self._tls = tls_context(ca_file) if tls else None
        # A self-signed relay (an invite's CA fingerprint): no CA to verify against, so its certificate itself is
        # pinned, checked right after the handshake and before anything (the hello, a token) is sent.
        self.ca_sha256 = ca_sha256
        if tls and ca_sha256 is not None and ca_file is None:
            self._tls = ssl.create_default_context()
            self._tls.check_hostname = False
            self._tls.verify_mode = ssl.CERT_NONE
        self.identity = identity
        self.node_id = identity.node_id
        self.swarm = swarm
        self.hello = Hello(swarm=swarm, public_key=identity.public_key, model=model[:MAX_NAME_CHARS],
                           client_version=CLIENT_VERSION, token=token)
        self.on_status = on_status
        # Connected / unreachable as a typed ``relay`` event (the app's one source of swarm state); without it, a line.
        self.on_link = on_link
        self.timeout_s = timeout_s
        self.ws: ClientConnection | None = None
        self.peers = 0
        self.limits: Limits | None = None  # the relay's, from its welcome
        self._backoff = 1.0
        self._next_try = 0.0
        self._ever_connected = False
        self._first_attempt = True
        self._trained: OrderedDict[str, str] = OrderedDict()  # content digest -> its author (this node: own)
        self._publish_tokens = 0.0  # paces publishing to the relay's groups_per_minute
        self._publish_stamp = time.monotonic()
        # The swarm's manifest (wire/manifest.py): the latest announced (with its signer, the signature checked), the
        # one this node joined with, and changes seen since.
        self.manifest: Manifest | None = None
        self.manifest_digest: str | None = None
        self.manifest_signer: bytes | None = None
        self.joined: Manifest | None = None
        self.joined_signer: bytes | None = None
        self.manifest_handed_from: tuple[bytes, ...] = ()  # earlier keys handing over to manifest_signer, checked
        self.on_manifest = on_manifest
        self._changes_told: set[tuple[str, bytes | None]] = set()
        self.refused: str | None = None  # why this node stopped using the relay for good

    @property
    def connected(self) -> bool:
        return self.ws is not None

    def ensure_connected(self) -> bool:
        if self.ws is not None:
            return True
        if self.refused is not None:
            return False
        if time.monotonic() < self._next_try:
            return False
        first, self._first_attempt = self._first_attempt, False
        try:
            ws = connect(self.url, max_size=MAX_FRAME_BYTES, open_timeout=self.timeout_s, close_timeout=2,
                         ssl=self._tls if self.url.startswith("wss://") else None)
        except ssl.SSLCertVerificationError as exc:
            # Retrying cannot make an untrusted certificate trusted: say so at once, as for a wrong token.
            why = (f"relay {self.url} presented a certificate this node does not trust ({exc.verify_message}): "
                   "if it uses a private CA, set relay_ca_file (--relay-ca-file) to that CA's certificate")
            if first:
                raise SapoError(why) from None
            self._retry_later(why, "its certificate is not trusted")
            return False
        except (OSError, TimeoutError, WebSocketException, InvalidURI) as exc:
            # A TLS port answers a plain HTTP request with TLS bytes: say what is likely wrong.
            tls_port = isinstance(exc, InvalidMessage) and self.url.startswith("ws://")
            hint = " (a TLS relay? use wss://)" if tls_port else ""
            self._retry_later(f"relay {self.url} unreachable ({first_line(exc, 120)}){hint}",
                              plain_reason(exc) + hint)
            return False
        if self.ca_sha256 is not None and self.url.startswith("wss://"):
            der = ws.socket.getpeercert(binary_form=True) if isinstance(ws.socket, ssl.SSLSocket) else None
            if der is None or hashlib.sha256(der).hexdigest() != self.ca_sha256:
                ws.close()
                why = (f"relay {self.url}'s certificate is not the one the invite pins "
                       f"(sha256 {self.ca_sha256[:12]}...)")
                if first:
                    raise SapoError(why)
                self._retry_later(why, "its certificate is not the invited one")
                return False
        self.ws = ws
        reply = self._request(self.hello)
        if isinstance(reply, Challenge):
            reply = self._request(Auth(signature=sign_challenge(self.identity, self.swarm, reply.nonce)))
        if isinstance(reply, Error) and reply.code in FATAL and first:
            raise SapoError(f"relay {self.url} refused this node: {reply.reason}")
        if not isinstance(reply, Welcome) or reply.node_id != self.node_id:
            why = f": {reply.reason}" if isinstance(reply, Error) else ""
            self._drop(f"relay {self.url} did not welcome this node{why}", "it did not welcome this node" + why)
            return False
        if not self._take_manifest(reply):
            return False
        self.peers = reply.peers
        if self.limits is None:
            self._publish_tokens = float(reply.limits.groups_per_minute)
        self.limits = reply.limits
        self._backoff = 1.0
        if self.on_link is not None:
            self.on_link(ev.Relay(state="connected", url=self.url, peers=reply.peers))
        else:
            self.on_status(f"{'re' if self._ever_connected else ''}connected to relay {self.url}, swarm "
                           f"{self.swarm!r}, {peers_online(reply.peers)}")
        self._ever_connected = True
        return True

    def _take_manifest(self, welcome: Welcome) -> bool:
        """The swarm's manifest from a welcome (wire/manifest.py), checked here; False (and refused) when it is bad.

        ``manifest``: the latest announced, ``manifest_signer`` the key that signed it (None: unsigned). ``joined``:
        the one this node follows (set by the runner when it joins, engine/run/joining.py). A different digest
        later, or the joined one signed by another key or unsigned, is reported once (``on_manifest``), never followed.
        """
        if welcome.manifest is None:
            return True
        try:
            if welcome.manifest_digest is None:
                raise ValueError("the relay sent a manifest without its digest")
            manifest = decode_manifest(welcome.manifest, welcome.manifest_digest)
            if manifest.swarm != self.swarm:
                raise ValueError(f"the manifest is swarm {manifest.swarm!r}'s, not {self.swarm!r}'s")
            signer = checked_signer(welcome, manifest)
            handed_from = handover_chain(welcome.manifest_handovers, signer)
        except ValueError as exc:
            self.refuse(f"relay {self.url} sent a swarm manifest this node refuses: {first_line(exc, 200)}")
            return False
        self.manifest, self.manifest_digest, self.manifest_signer = manifest, welcome.manifest_digest, signer  # latest
        self.manifest_handed_from = handed_from
        if self.joined_signer is not None and bytes(self.joined_signer) in handed_from:
            # The key this node joined with handed over (its record follows at the next start, joining.py): from
            # now on a manifest signed by the old key is a change, as by any other key.
            self.on_status(f"swarm {self.swarm}: manifest key {signer_hex(self.joined_signer)[:12]} handed over to "
                           f"{signer_hex(signer)[:12]}; its signature is the one followed now")
            self.joined_signer = signer
        if self.joined is not None and self.on_manifest is not None:
            self.tell_change(self.joined, self.joined_signer, self.on_manifest)
        return True

    def tell_change(self, joined: Manifest, joined_signer: bytes | None,
                    emit: Callable[[ev.SwarmManifest], object]) -> bool:
        """True if the announced manifest is not the one this node follows (``joined``, signed by ``joined_signer``):
        another digest, or signed by another key or no longer signed. Reported once per announced digest and signer."""
        announced, signer = self.manifest, self.manifest_signer
        if announced is None:
            return False
        resigned = signer_changes(joined_signer, signer, self.manifest_handed_from)
        if manifest_digest(announced) == manifest_digest(joined) and not resigned:
            return False
        told = (manifest_digest(announced), signer)
        if told not in self._changes_told:
            self._changes_told.add(told)
            emit(manifest_changed(joined, joined_signer, announced, signer,
                                  manifest_changes(joined, announced) + resigned))
        return True

    def refuse(self, why: str) -> None:
        """Stop using this relay for good (a bad manifest, a pinned digest or signer it fails): train alone."""
        self.refused = why
        self._close()
        if self.on_manifest is not None:
            self.on_manifest(ev.SwarmManifest(state="refused", swarm=self.swarm, reason=why))
        else:
            self.on_status(f"{why}; training alone")

    def _retry_later(self, why: str, reason: str = "") -> None:
        """``why``: the terminal's line; ``reason``: the same in a few plain words, for the app's swarm card."""
        delay = self._backoff * random.uniform(0.8, 1.2)
        self._next_try = time.monotonic() + delay
        self._backoff = min(self._backoff * 2, 60.0)
        failed, then = self.url, ""
        if len(self.urls) > 1:  # the next replica; the backoff still grows until one answers
            self.url = self.urls[(self.urls.index(self.url) + 1) % len(self.urls)]
            then = f" with {self.url}"
        if self.on_link is not None:
            self.on_link(ev.Relay(state="unreachable", url=failed, reason=reason or why,
                                  retry_at=round(time.time() + delay, 3)))
        else:
            self.on_status(f"{why}; training on local groups, retrying{then} in {delay:.0f}s")

    def _close(self) -> None:
        ws, self.ws = self.ws, None
        if ws is not None:
            try:
                ws.close()
            except Exception:  # noqa: BLE001 - already broken; nothing more to do
                pass

    def _drop(self, why: str, reason: str = "") -> None:
        self._close()
        self._retry_later(why, reason)

    def _request(self, msg: Hello | Auth | Publish | Sample | StatsRequest | Report) -> ServerMessage | None:
        """Send one message and read its one reply; None (and disconnected) on any failure."""
        if self.ws is None:
            return None
        try:
            self.ws.send(encode(msg))
            frame = self.ws.recv(timeout=self.timeout_s)
            reply = decode(frame)
            if (isinstance(reply, Error) and reply.code == Code.UNAVAILABLE and len(self.urls) > 1
                    and not isinstance(msg, (Hello, Auth))):  # (a refused hello is dropped by the caller)
                # This replica lost its shared state (Redis); another may still have it.
                self._drop(f"relay {self.url} is unavailable ({reply.reason[:80]})", "it is unavailable")
            return reply  # type: ignore[return-value]
        except ProtocolError as exc:
            self._drop(f"relay sent a frame we refuse ({exc.code})", "it sent a message this node refuses")
        except (OSError, TimeoutError, WebSocketException) as exc:
            self._drop(f"lost the relay ({first_line(exc, 120)})", "connection lost")
        return None

    # --- requests ---
    def publish(self, groups: list[Group]) -> Ack | None:
        """Sign and publish the groups the relay's limits allow (size, count, groups per minute)."""
        if not groups or not self.ensure_connected():
            return None
        assert self.limits is not None
        fits = [g for g in groups if _within(g, self.limits)]
        if len(fits) < len(groups):
            self.on_status(f"{len(groups) - len(fits)} group(s) not shared: larger than relay {self.url} accepts")
        self._refill_publish_tokens()
        allowed = min(self.limits.max_groups_per_publish, int(self._publish_tokens))
        if len(fits) > allowed:
            self.on_status(f"{len(fits) - allowed} group(s) not shared: over relay {self.url}'s "
                           f"{self.limits.max_groups_per_publish} per publish / {self.limits.groups_per_minute} per minute")
            fits = fits[:allowed]
        if not fits:
            return None
        self._publish_tokens -= len(fits)
        for g in fits:  # a copy of our own work coming back under another name is never trained here
            self.remember(group_digest(g), self.node_id)
        signatures = [sign_group(self.identity, self.swarm, g) for g in fits]
        reply = self._request(Publish(groups=fits, signatures=signatures))
        return reply if isinstance(reply, Ack) else None

    def _refill_publish_tokens(self) -> None:
        assert self.limits is not None
        now = time.monotonic()
        per_min = self.limits.groups_per_minute
        self._publish_tokens = min(float(per_min), self._publish_tokens + (now - self._publish_stamp) * per_min / 60)
        self._publish_stamp = now

    def sample(self, n: int, tasks: list[str] | None, max_age_s: float = 600.0) -> list[SharedGroup]:
        """Up to ``n`` groups from others, unchecked: pass each through ``screen`` first."""
        if n <= 0 or not self.ensure_connected():
            return []
        assert self.limits is not None
        wanted = min(n, self.limits.max_sample_n)
        if wanted <= 0:
            return []
        tasks = tasks[: self.limits.max_task_filters] if tasks else None
        reply = self._request(Sample(n=wanted, tasks=tasks or None, max_age_s=max_age_s))
        return list(reply.groups[:wanted]) if isinstance(reply, Groups) else []  # never more than asked for

    def screen(self, shared: SharedGroup) -> str | None:
        """Why a received group must not be used (``bad_signature``, ``own``, ``not_author``, ``replay``, ``copy``),
        or None.

        Runs before anything else looks at the group: the relay passes groups on, but only the
        author's signature (over this swarm and the exact content) says who wrote it, and only a
        question of the signer's own stream says the signer drew it (wire.authorship). Content trained
        or published here before is a ``replay`` from the same author, else a ``copy``.
        """
        if not shared_group_ok(shared, self.swarm):
            return "bad_signature"
        if shared.node_id == self.node_id:
            return "own"
        if not authored_by(shared.group, shared.node_id):
            return "not_author"
        author = self._trained.get(group_digest(shared.group))
        if author is not None:
            return "copy" if author not in ("", shared.node_id) else "replay"
        return None

    def remember(self, digest: str, author: str) -> None:
        """Content ``digest`` (``group_digest``) by ``author`` was trained or published here: never train it again."""
        self._trained.setdefault(digest, author)
        self._trained.move_to_end(digest)
        while len(self._trained) > TRAINED_MEMORY:
            self._trained.popitem(last=False)

    def report(self, round_: int, trained: list[str]) -> Ack | None:
        """Tell the relay this round is done and which of others' groups were trained (``group_digest``s, signed).

        Those digests are also remembered here, so the same group is never trained twice.
        """
        digests = list(dict.fromkeys(trained))
        for d in digests:
            self.remember(d, "")  # (the node remembers each one's author first: SwarmClient.remember)
        if self.ws is None:
            return None
        limit = self.limits.max_sample_n if self.limits is not None else len(digests)
        digests = digests[:limit]
        signature = sign_report(self.identity, self.swarm, round_, digests)
        reply = self._request(Report(round=round_, trained=digests, signature=signature))
        return reply if isinstance(reply, Ack) else None

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


def checked_signer(welcome: Welcome, manifest: Manifest) -> bytes | None:
    """The key that signed the welcome's manifest, its signature checked; None when unsigned. ValueError (one line)
    for a half-signed manifest or a signature its announced signer did not make: a relay forging its operator's."""
    if welcome.manifest_signer is None and welcome.manifest_signature is None:
        return None
    if welcome.manifest_signer is None or welcome.manifest_signature is None:
        raise ValueError("the relay sent a manifest signature without its signer, or a signer without a signature")
    if not manifest_signature_ok(welcome.manifest_signer, welcome.manifest_signature, manifest):
        named = signer_hex(welcome.manifest_signer)[:12]
        raise ValueError(f"its signature does not verify with the key it names ({named})")
    return welcome.manifest_signer


def manifest_changed(joined: Manifest, joined_signer: bytes | None, new: Manifest, signer: bytes | None,
                     changes: list[str]) -> ev.SwarmManifest:
    """The event for a relay that announces another manifest (or signer) than the one this node joined with."""
    return ev.SwarmManifest(state="changed", swarm=new.swarm, digest=manifest_digest(new), mix=mix_summary(new),
                            joined_digest=manifest_digest(joined), changes=changes, signer=signer_hex(signer),
                            joined_signer=signer_hex(joined_signer))


def peers_online(n: int) -> str:
    return f"{n} peer{'' if n == 1 else 's'} online"


def plain_reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words a volunteer can read (no errno): for the app's swarm card."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return "no such host"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[0].lower() + exc.strerror[1:]
    return first_line(exc, 120)


def _within(group: Group, limits: Limits) -> bool:
    return (len(group.completions) <= limits.max_completions
            and len(group.question) <= limits.max_question_chars
            and len(group.answer) <= limits.max_question_chars
            and all(len(c) <= limits.max_completion_chars for c in group.completions))
