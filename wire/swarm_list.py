"""A relay's public swarms as ``GET /swarms`` lists them (relay/status.py ``public_swarms``), read by the app.

Pure: where to ask (``swarms_url``, from a relay URL) and what the answer may hold (``decode_swarm_list``, bounded,
one line saying what is wrong). The app's wizard fetches it (app/swarm_list.py) so that a volunteer picks a swarm
instead of typing its name. Fields the app does not use are ignored, so a newer relay's list still reads.
"""

from __future__ import annotations

from typing import Annotated, Final
from urllib.parse import urlsplit, urlunsplit

import msgspec

from wire.addresses import relay_url_problem, split_relay_urls
from wire.protocol import SwarmName

MAX_LIST_BYTES: Final = 256 * 1024  # 100 swarms (the relay lists at most that many) of a few hundred bytes each
MAX_LISTED: Final = 100

Words = Annotated[str, msgspec.Meta(max_length=300)]


class PublicSwarm(msgspec.Struct, frozen=True):
    """One public swarm: its name, what it trains (``tasks`` in short words) and how busy it is."""

    swarm: SwarmName
    description: Words = ""
    tasks: Annotated[list[Words], msgspec.Meta(max_length=32)] = []
    models: Annotated[list[Words], msgspec.Meta(max_length=16)] = []
    peers_online: Annotated[int, msgspec.Meta(ge=0)] = 0
    groups_per_minute: Annotated[float, msgspec.Meta(ge=0)] = 0.0


class SwarmList(msgspec.Struct, frozen=True):
    swarms: Annotated[list[PublicSwarm], msgspec.Meta(max_length=MAX_LISTED)]


_decoder = msgspec.json.Decoder(SwarmList)


def swarms_url(relay: str) -> str:
    """The list's address at a relay setting's first URL: ws -> http, wss -> https, path /swarms.

    Raises ValueError (the relay rule's one line, wire.addresses) for an address that is not a relay's."""
    urls = split_relay_urls(relay)
    if not urls:
        raise ValueError("enter the relay address first (ws://host:port or wss://host)")
    if (problem := relay_url_problem(urls[0])) is not None:
        raise ValueError(problem)
    parts = urlsplit(urls[0])
    return urlunsplit(("https" if parts.scheme == "wss" else "http", parts.netloc, "/swarms", "", ""))


def decode_swarm_list(body: bytes) -> list[PublicSwarm]:
    """The swarms of a ``GET /swarms`` answer; ValueError with one line when it is not one (or too big)."""
    if len(body) > MAX_LIST_BYTES:
        raise ValueError(f"the relay's list of swarms is over {MAX_LIST_BYTES // 1024} KiB")
    try:
        return list(_decoder.decode(body).swarms)
    except msgspec.DecodeError as exc:  # ValidationError is one
        raise ValueError(f"the relay's list of swarms does not read: {exc}") from None
    except RecursionError:  # msgspec recurses into an unknown field's nesting: a few KiB of "[" reach the limit
        raise ValueError("the relay's list of swarms does not read: JSON nested too deeply") from None
