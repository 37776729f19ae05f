"""``loadgen.redact``: what may be stored of a URL, a header set and a server's text."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.redact import REDACTED, Scrubber, basic_authorization, redact_headers, redact_url
from loadgen.run.options import SessionOptions


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("http://user:pass@127.0.0.1:8000/v1", "http://<redacted>@127.0.0.1:8000/v1"),
        ("https://sk-token@api.example/v1", "https://<redacted>@api.example/v1"),
        ("http://u:p%40ss@h/v1", "http://<redacted>@h/v1"),
        ("http://a:b@[::1]:9/metrics", "http://<redacted>@[::1]:9/metrics"),
        ("http://h/v1?api-key=abc&x=1", "http://h/v1?api-key=<redacted>&x=1"),
        ("http://h/v1?Token=abc&token", "http://h/v1?Token=<redacted>&token"),
        ("http://u:p@h:99999999/v1", "http://<redacted>@h:99999999/v1"),
        ("not a url", "not a url"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_headers_by_name() -> None:
    assert redact_headers({"Authorization": "Bearer k", "X-Api-Key": "k", "X-Tenant": "t"}) == {
        "Authorization": REDACTED,
        "X-Api-Key": REDACTED,
        "X-Tenant": "t",
    }


def test_a_scrubber_without_secrets_changes_nothing() -> None:
    scrubber = Scrubber.of(headers={"accept": "text/event-stream"}, urls=["http://h/v1"])
    assert scrubber.secrets == ()
    assert scrubber.scrub_optional("length") == "length"
    assert scrubber.scrub_optional(None) is None


def test_a_scrubber_takes_every_credential_of_the_run() -> None:
    scrubber = Scrubber.of(
        headers={"authorization": "Bearer sk-123", "x-api-key": "k-456", "x-tenant": "t"},
        urls=["http://alice:p%40ss@h/v1?token=q-789"],
        values=[None, "plain-0"],
    )
    text = "sk-123 / Bearer sk-123 / k-456 / p@ss / p%40ss / q-789 / plain-0 / alice / t"
    assert scrubber.scrub(text) == " / ".join([REDACTED] * 7 + ["alice", "t"])
    assert scrubber.scrub_optional("no secret here") == "no secret here"


def test_a_secret_cut_off_at_the_end_of_a_text_is_scrubbed_too() -> None:
    """Error texts are cut to a length, which may fall inside an echoed key."""
    scrubber = Scrubber.of(values=["sk-0123456789"])
    assert scrubber.scrub("HTTP 401: bad key sk-0123") == f"HTTP 401: bad key {REDACTED}"
    assert scrubber.scrub("HTTP 401: sk-") == "HTTP 401: sk-"  # too short to tell


def test_a_token_passed_as_the_url_user_is_a_secret() -> None:
    scrubber = Scrubber.of(urls=["https://sk-user-token@api.example/v1"])
    assert scrubber.scrub("bad key sk-user-token") == f"bad key {REDACTED}"


@given(
    key=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=4, max_size=16),
    before=st.text(max_size=10),
    after=st.text(max_size=10),
)
def test_the_key_never_survives_whatever_surrounds_it(key: str, before: str, after: str) -> None:
    """No occurrence is left outside the markers (a key may be part of the marker's own
    text, so the markers are blanked out with a character no key holds before looking).
    Keys of 4 characters or more; shorter ones are the next test's."""
    scrubber = Scrubber.of(headers={"authorization": f"Bearer {key}"})
    scrubbed = scrubber.scrub(before + key + after + key)
    assert key not in scrubbed.replace(REDACTED, "\x00")


def test_a_secret_of_one_to_three_characters_goes_only_where_it_stands_alone() -> None:
    """A one-letter test password must not turn every ``a`` of a message into a marker."""
    scrubber = Scrubber.of(urls=["http://user:a@host/v1"])
    text = "bad password a for user at a host: 'a' (a)"
    assert scrubber.scrub(text) == (
        f"bad password {REDACTED} for user at {REDACTED} host: '{REDACTED}' ({REDACTED})"
    )
    # Inside a word it stays; the cut-off rule (4 characters and up) does not apply.
    assert scrubber.scrub("a bad apple") == f"{REDACTED} bad apple"
    assert Scrubber.of(values=["xyz"]).scrub("xyzzy and xy") == "xyzzy and xy"


@pytest.mark.parametrize(
    ("url", "pair"),
    [
        ("http://alice:pw@h:8000/v1", b"alice:pw"),
        ("http://al%40ice:p%3Aw%2F@h/v1", b"al@ice:p:w/"),  # percent-decoded
        ("http://token@h/v1", b"token:"),  # a user alone: an empty password
        ("https://:pw@h", b":pw"),
    ],
)
def test_basic_authorization_is_the_user_info_in_base64(url: str, pair: bytes) -> None:
    assert basic_authorization(url) == "Basic " + base64.b64encode(pair).decode()


@pytest.mark.parametrize("url", ["http://h/v1", "http://h/v1?x=a@b", "not a url", "http://[::1"])
def test_no_user_info_no_basic_authorization(url: str) -> None:
    assert basic_authorization(url) is None


def test_scrub_tree_scrubs_every_string_keys_too() -> None:
    scrubber = Scrubber.of(values=["sk-SECRET"])
    doc = {"a": "x sk-SECRET y", "sk-SECRET": [1, "sk-SECRET", {"n": None}], "f": 1.5}
    assert scrubber.scrub_tree(doc) == {
        "a": "x <redacted> y",
        "<redacted>": [1, "<redacted>", {"n": None}],
        "f": 1.5,
    }
    assert Scrubber().scrub_tree(doc) is doc  # no secrets: nothing to copy


def test_the_credential_sent_api_key_then_header_then_user_info(tmp_path: Path) -> None:
    def opts(**kw: object) -> SessionOptions:
        return SessionOptions(
            trace_path=tmp_path / "t.parquet",
            run_dir=tmp_path / "run",
            **kw,  # type: ignore[arg-type]
        )

    url = "http://u:p@h/v1"
    basic = "Basic " + base64.b64encode(b"u:p").decode()
    assert opts(base_url=url).request_headers() == {"authorization": basic}
    assert opts(base_url=url, api_key="k").request_headers() == {"authorization": "Bearer k"}
    given = {"Authorization": "Token t"}
    assert opts(base_url=url, headers=given).request_headers() == given
    assert opts(base_url="http://h/v1").request_headers() == {}
    secret = "http://u:pa55word@h/v1"
    credential = base64.b64encode(b"u:pa55word").decode()
    scrubber = opts(base_url=secret).scrubber()
    assert scrubber.scrub(f"got {credential}, pa55word") == f"got {REDACTED}, {REDACTED}"
