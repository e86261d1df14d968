"""Invite links: one link that carries everything a node needs to join a swarm. Pure; no I/O.

Two forms of the same content::

    sapo-swarm://join?v=1&relay=wss%3A%2F%2Frelay.example%3A8765&swarm=arithmetic&digest=HEX64&check=HEX8
    https://relay.example:8765/join#v=1&relay=...&swarm=...&check=...      (a page can show it as a button)

Fields: ``relay`` (one or more, replicas in order), ``swarm``, ``token`` (a private swarm's), ``ca`` (sha256 of a
self-signed relay's certificate, 64 hex), ``digest`` (the sha256 of the swarm manifest the inviter meant, 64 hex),
``signer`` (the public key of the operator's manifest key, 64 hex: wire/manifest.py), and ``check``: the first 8
hex of sha256 over the other fields, always last. ``check`` catches a truncated or mistyped link, or one edited by
hand; it is no signature (anyone can recompute it): what pins the relay is ``ca``, and what pins the swarm's rules
is ``digest`` and ``signer``, so a link is only as trustworthy as the way it came from the operator. Fields are
added optional: a link without the newer ones reads as before. In the https form the fields are the fragment,
which browsers never send to a server, so a token in it does not reach web logs.

``parse_invite`` raises ``InviteError`` with one line naming what is wrong; ``format_invite`` and
``parse_invite`` round-trip (tests/test_invite.py, property-tested).
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Final
from urllib.parse import parse_qsl, quote, urlsplit

import msgspec

from wire.addresses import relay_url_problem
from wire.protocol import SwarmName

SCHEME: Final = "sapo-swarm"
INVITE_VERSION: Final = 1
MAX_LINK_CHARS: Final = 4096
MAX_RELAYS: Final = 8
Hex64 = Annotated[str, msgspec.Meta(pattern=r"\A[0-9a-f]{64}\Z")]
_FIELDS: Final = ("v", "relay", "swarm", "token", "ca", "digest", "signer", "check")


class InviteError(ValueError):
    """A link that cannot be used; the message is one line saying why."""


class Invite(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    relays: Annotated[list[Annotated[str, msgspec.Meta(max_length=512)]], msgspec.Meta(min_length=1, max_length=MAX_RELAYS)]
    swarm: SwarmName
    token: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | None = None
    ca_sha256: Hex64 | None = None
    manifest_digest: Hex64 | None = None
    manifest_signer: Hex64 | None = None

    def __post_init__(self) -> None:
        for url in self.relays:
            if (problem := relay_url_problem(url)) is not None:
                raise ValueError(problem)
            if "," in url:
                raise ValueError(f"relay URL {url!r} holds a comma: give replicas as separate URLs")


def _pairs(invite: Invite) -> list[tuple[str, str]]:
    pairs = [("v", str(INVITE_VERSION))] + [("relay", url) for url in invite.relays] + [("swarm", invite.swarm)]
    for key, value in (("token", invite.token), ("ca", invite.ca_sha256), ("digest", invite.manifest_digest),
                       ("signer", invite.manifest_signer)):
        if value is not None:
            pairs.append((key, value))
    return pairs


def _check(pairs: list[tuple[str, str]]) -> str:
    canonical = "\n".join(f"{k}={v}" for k, v in pairs).encode("utf-8", errors="surrogatepass")
    return hashlib.sha256(canonical).hexdigest()[:8]


def _query(invite: Invite) -> str:
    pairs = _pairs(invite)
    pairs.append(("check", _check(pairs)))
    return "&".join(f"{k}={quote(v, safe='')}" for k, v in pairs)


def format_invite(invite: Invite) -> str:
    """The ``sapo-swarm://`` link."""
    return f"{SCHEME}://join?{_query(invite)}"


def format_invite_https(invite: Invite, page: str | None = None) -> str:
    """The https form: ``page`` (default: the first relay's host as https://HOST[:PORT]) + ``/join#`` + the fields."""
    if page is None:
        parts = urlsplit(invite.relays[0])
        page = f"{'https' if parts.scheme == 'wss' else 'http'}://{parts.netloc}"
    return f"{page.rstrip('/')}/join#{_query(invite)}"


def parse_invite(link: str) -> Invite:
    """An invite from either form; ``InviteError`` (one line) for anything malformed, truncated or altered."""
    if not isinstance(link, str):
        raise InviteError("an invite link is text")
    link = link.strip()
    if len(link) > MAX_LINK_CHARS:
        raise InviteError(f"invite link longer than {MAX_LINK_CHARS} characters")
    if not link:
        raise InviteError("the invite link is empty")
    if link.startswith(f"{SCHEME}://"):
        head, sep, query = link.partition("?")
        if head != f"{SCHEME}://join" or not sep:
            raise InviteError(f"not an invite link: it should start {SCHEME}://join?")
    elif re.match(r"\Ahttps?://", link):
        head, sep, query = link.partition("#")
        if not sep or not head.rstrip("/").endswith("/join"):
            raise InviteError("not an invite link: an https invite ends in /join#... (was the part after # cut?)")
    else:
        raise InviteError(f"not an invite link: it should start {SCHEME}:// or https://")
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True, errors="strict")
    except (ValueError, UnicodeDecodeError):
        raise InviteError("the invite link is damaged: its fields do not read as key=value pairs") from None
    if unknown := [k for k, _ in pairs if k not in _FIELDS]:
        raise InviteError(f"the invite link has an unknown field {unknown[0][:20]!r} (a newer version?)")
    if not pairs or pairs[-1][0] != "check":
        raise InviteError("the invite link is truncated: its check field, always last, is missing")
    body, check = pairs[:-1], pairs[-1][1]
    if not body or body[0] != ("v", str(INVITE_VERSION)):
        version = body[0][1] if body and body[0][0] == "v" else "none"
        raise InviteError(f"invite link version {version[:10]!r} is not supported (this build reads {INVITE_VERSION})")
    if _check(body) != check:
        raise InviteError("the invite link was altered or cut short: its check does not match (copy it again)")
    values: dict[str, list[str]] = {}
    for key, value in body[1:]:
        values.setdefault(key, []).append(value)
    for key in ("swarm", "token", "ca", "digest", "signer"):
        if len(values.get(key, [])) > 1:
            raise InviteError(f"the invite link gives {key} twice")
    if not values.get("relay"):
        raise InviteError("the invite link names no relay")
    if not values.get("swarm"):
        raise InviteError("the invite link names no swarm")
    one = {k: v[0] for k, v in values.items() if k != "relay"}
    try:
        return msgspec.convert({"relays": values["relay"], "swarm": one["swarm"], "token": one.get("token"),
                                "ca_sha256": one.get("ca"), "manifest_digest": one.get("digest"),
                                "manifest_signer": one.get("signer")}, Invite)
    except (msgspec.ValidationError, ValueError) as exc:
        field = str(exc).rpartition("$.")[2].rstrip("`") if "$." in str(exc) else ""
        name = {"relays": "relay", "ca_sha256": "ca", "manifest_digest": "digest",
                "manifest_signer": "signer"}.get(field.split("[")[0], field)
        raise InviteError(f"the invite link's {name or 'content'} is invalid: {str(exc).split(' - at ')[0]}"
                          ) from None
