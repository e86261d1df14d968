"""Invite links (wire/invite.py): round trip in both forms, and one clear line for every damaged link."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from wire.invite import Invite, InviteError, format_invite, format_invite_https, parse_invite

HEX64 = st.text("0123456789abcdef", min_size=64, max_size=64)
HOSTS = st.from_regex(r"\A[a-z][a-z0-9-]{0,20}(\.[a-z]{2,6}){0,2}\Z", fullmatch=True) | st.just("127.0.0.1")
URLS = st.builds(lambda s, h, p: f"{s}://{h}" + (f":{p}" if p else ""), st.sampled_from(["ws", "wss"]), HOSTS,
                 st.one_of(st.none(), st.integers(1, 65535)))
INVITES = st.builds(
    Invite,
    relays=st.lists(URLS, min_size=1, max_size=3),
    swarm=st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,20}\Z", fullmatch=True),
    token=st.one_of(st.none(), st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=40)),
    ca_sha256=st.one_of(st.none(), HEX64),
    manifest_digest=st.one_of(st.none(), HEX64),
    manifest_signer=st.one_of(st.none(), HEX64),
)


@settings(max_examples=200, deadline=None)
@given(INVITES)
def test_both_forms_round_trip(invite: Invite) -> None:
    assert parse_invite(format_invite(invite)) == invite
    assert parse_invite(format_invite_https(invite)) == invite


@settings(max_examples=200, deadline=None)
@given(INVITES, st.data())
def test_any_truncated_link_is_one_clear_error(invite: Invite, data: st.DataObject) -> None:
    link = format_invite(invite)
    cut = data.draw(st.integers(0, len(link) - 1))
    with pytest.raises(InviteError) as err:
        parse_invite(link[:cut])
    assert "\n" not in str(err.value) and str(err.value)


@settings(max_examples=200, deadline=None)
@given(INVITES, st.data())
def test_an_altered_character_is_refused_or_changes_nothing(invite: Invite, data: st.DataObject) -> None:
    link = format_invite(invite)
    start = link.index("?") + 1
    i = data.draw(st.integers(start, len(link) - 1))
    new = data.draw(st.sampled_from("abcXYZ019%&=-_.~"))
    tampered = link[:i] + new + link[i + 1:]
    try:
        parsed = parse_invite(tampered)
    except InviteError as exc:
        assert "\n" not in str(exc)
    else:  # only an equivalent spelling (e.g. %3a for %3A) may pass, and then it says the same
        assert parsed == invite


@pytest.mark.parametrize(("link", "words"), [
    ("", "empty"),
    ("http://example.org/", "not an invite"),
    ("sapo-swarm://join", "should start"),
    ("sapo-swarm://join?v=1&relay=ws%3A%2F%2Fh%3A1&swarm=s", "truncated"),
    ("sapo-swarm://join?v=1&relay=ws%3A%2F%2Fh%3A1&swarm=s&check=00000000", "altered"),
    ("sapo-swarm://join?v=9&swarm=s&check=00000000", "version"),
    ("sapo-swarm://join?v=1&evil=1&check=00000000", "unknown field"),
    ("https://relay.example/join", "ends in /join#"),
])
def test_bad_links_say_what_is_wrong(link: str, words: str) -> None:
    with pytest.raises(InviteError, match=words):
        parse_invite(link)


def test_bad_field_values_are_named() -> None:
    # A well-checked link whose relay URL is not a relay's: the field is named.
    from wire.invite import _check, quote

    pairs = [("v", "1"), ("relay", "http://h:1"), ("swarm", "s")]
    link = "sapo-swarm://join?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in pairs) + f"&check={_check(pairs)}"
    with pytest.raises(InviteError, match="relay"):
        parse_invite(link)


def test_a_signer_pin_travels_in_the_link_and_cannot_be_swapped() -> None:
    invite = Invite(relays=["wss://relay.example:8765"], swarm="sums", manifest_digest="d" * 64,
                    manifest_signer="5" * 64)
    link = format_invite(invite)
    assert "&signer=" + "5" * 64 + "&check=" in link and parse_invite(link).manifest_signer == "5" * 64
    # Another key typed over it (by mistake, or by hand): the check says so. It is no signature: an invite is only
    # as trustworthy as the way it came from the operator (wire/invite.py).
    with pytest.raises(InviteError, match="altered"):
        parse_invite(link.replace("5" * 64, "6" * 64))
    # Cut out, the pin is gone but so is the check's agreement: refused too.
    with pytest.raises(InviteError, match="altered"):
        parse_invite(link.replace("&signer=" + "5" * 64, ""))
    # Links from before the field read as before: no signer pinned.
    older = format_invite(Invite(relays=invite.relays, swarm="sums", manifest_digest="d" * 64))
    assert "signer" not in older and parse_invite(older).manifest_signer is None


def test_a_signer_that_is_not_a_key_is_named() -> None:
    from wire.invite import _check, quote

    pairs = [("v", "1"), ("relay", "ws://h:1"), ("swarm", "s"), ("signer", "not-a-key")]
    link = "sapo-swarm://join?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in pairs) + f"&check={_check(pairs)}"
    with pytest.raises(InviteError, match="the invite link's signer is invalid"):
        parse_invite(link)
