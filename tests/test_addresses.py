"""wire.addresses: the relay-URL rule the app shows and the engine enforces (the same words in both)."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.addresses import relay_url_problem, relay_urls_problem, split_relay_urls

LOOKS = "relay URL must look like ws://host:port or wss://host:port, got {!r}"
PORT = "relay URL has an invalid port: {!r}"


@pytest.mark.parametrize("url", ["ws://h:1", "wss://relay.example.org", "ws://127.0.0.1:8765/", "ws://[::1]:8765",
                                 "wss://h:443/path?x=1", "ws://h:0", "ws://h:65535"])
def test_good_relay_urls(url: str) -> None:
    assert relay_url_problem(url) is None


@pytest.mark.parametrize(("url", "problem"), [
    ("http://x:1", LOOKS), ("ws://", LOOKS), ("relay.example.org", LOOKS), ("ws://:1", LOOKS), ("", LOOKS),
    ("http://h:99999", LOOKS),  # the scheme is judged before the port
    ("ws://[::1", LOOKS),  # not even a URL (urlsplit refuses it)
    ("ws://h:99999", PORT), ("ws://h:-1", PORT), ("wss://h:port", PORT),
])
def test_bad_relay_urls(url: str, problem: str) -> None:
    assert relay_url_problem(url) == problem.format(url)


def test_a_list_is_replicas_in_order_once_each() -> None:
    assert split_relay_urls("ws://a:1, wss://b:2,ws://a:1,") == ["ws://a:1", "wss://b:2"]
    assert relay_urls_problem("ws://a:1, wss://b:2,ws://a:1,") is None


@pytest.mark.parametrize("text", ["", " , ", ",,"])
def test_an_empty_list(text: str) -> None:
    assert relay_urls_problem(text) == f"relay must be one or more URLs (ws://host:port, comma-separated), got {text!r}"


def test_a_list_says_its_first_problem() -> None:
    assert relay_urls_problem("ws://a:1,http://b:2,ws://c:99999") == LOOKS.format("http://b:2")
    assert relay_urls_problem("ws://a:1, ws://c:99999 ") == PORT.format("ws://c:99999")


hosts = st.text(string.ascii_lowercase + string.digits + ".-", min_size=1, max_size=20).filter(lambda h: h[0].isalnum())


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["ws", "wss"]), hosts, st.integers(0, 65535))
def test_every_ws_host_and_port_is_accepted(scheme: str, host: str, port: int) -> None:
    assert relay_url_problem(f"{scheme}://{host}:{port}") is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_text_gets_a_one_line_answer_and_never_an_exception(text: str) -> None:
    for problem in (relay_url_problem(text), relay_urls_problem(text)):
        assert problem is None or (problem.startswith("relay ") and "\n" not in problem)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["ws://a:1", "wss://b", "http://c:2", "ws://d:99999", " ", ""]), max_size=5))
def test_a_list_is_fine_exactly_when_it_has_urls_and_each_is(parts: list[str]) -> None:
    text = ",".join(parts)
    urls = split_relay_urls(text)
    expected_ok = bool(urls) and all(relay_url_problem(u) is None for u in urls)
    assert (relay_urls_problem(text) is None) == expected_ok
