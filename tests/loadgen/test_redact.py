"""``loadgen.redact``: what may be stored of a URL, a header set and a server's text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.redact import REDACTED, Scrubber, redact_headers, redact_url


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
    key=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=16),
    before=st.text(max_size=10),
    after=st.text(max_size=10),
)
def test_the_key_never_survives_whatever_surrounds_it(key: str, before: str, after: str) -> None:
    """No occurrence is left outside the markers (a key may be part of the marker's own
    text, so the markers are blanked out with a character no key holds before looking)."""
    scrubber = Scrubber.of(headers={"authorization": f"Bearer {key}"})
    scrubbed = scrubber.scrub(before + key + after + key)
    assert key not in scrubbed.replace(REDACTED, "\x00")
