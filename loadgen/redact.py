"""Credentials out of everything stored or printed: URLs, headers, and any text a server
may have echoed them into.

``redact_url`` hides a URL's user info (``http://user:pass@host`` ->
``http://<redacted>@host``) and the values of query parameters named like credentials;
``redact_headers`` hides the values of headers named like credentials; ``basic_authorization``
turns a URL's user info into the ``Authorization`` value that sends it; a ``Scrubber`` knows
the secret values of one run (the API key, credential header values, a URL's password)
and replaces each wherever it appears in a string, whatever a server echoed: the ``error``
column, endpoint errors, scrape errors. Applied where a value is stored (run.json, a run
row, sweep.json) or raised, so no later reader has to remember.

Imports nothing of ours (the client and ``loadgen.run`` use it).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote, urlsplit, urlunsplit

REDACTED: Final = "<redacted>"
SECRET_WORDS: Final = ("authorization", "key", "token", "secret", "cookie", "password")
"""A header or query parameter whose name contains one of these holds a credential."""
_MIN_CUT: Final = 4
"""Characters of a secret's start, at the end of a text, taken for a cut-off secret."""
_SHORT: Final = 4
"""A secret shorter than this (a test password such as ``a``) is replaced only where it
stands alone, not inside words: replaced everywhere, it would cut every message to pieces
(every ``a``). From this length on, a secret is replaced wherever it appears."""
_USERINFO: Final = re.compile(r"(//)[^/?#@]*@")
"""User info after the scheme, for URLs ``urlsplit`` cannot take apart."""


def is_secret_name(name: str) -> bool:
    """Whether a header or query parameter of this name holds a credential."""
    lower = name.lower()
    return any(word in lower for word in SECRET_WORDS)


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Header names with their values, credentials replaced by ``<redacted>``."""
    return {name: (REDACTED if is_secret_name(name) else value) for name, value in headers.items()}


def _redact_query(query: str) -> str:
    parts = []
    for item in query.split("&"):
        name, sep, _ = item.partition("=")
        parts.append(f"{name}={REDACTED}" if sep and is_secret_name(unquote(name)) else item)
    return "&".join(parts)


def redact_url(url: str) -> str:
    """``url`` as it may be stored or shown: user info replaced by ``<redacted>`` (the user
    name may itself be the credential), values of query parameters named like credentials
    too. Anything else is kept as given."""
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
    except ValueError:
        return _USERINFO.sub(rf"\1{REDACTED}@", url)
    netloc = f"{REDACTED}@{host}" if "@" in parts.netloc else parts.netloc
    query = _redact_query(parts.query) if parts.query else parts.query
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def basic_authorization(url: str) -> str | None:
    """The ``Authorization: Basic`` value of a URL's user info (``http://user:pass@host``:
    ``Basic base64(user:pass)``, percent-decoded as RFC 3986 writes them), or None when the
    URL has none. HTTP clients never send user info on the wire, so this is how it goes."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if "@" not in parts.netloc:
        return None
    userinfo = parts.netloc.rpartition("@")[0]
    user, _, password = userinfo.partition(":")
    pair = f"{unquote(user)}:{unquote(password)}".encode()
    return "Basic " + base64.b64encode(pair).decode("ascii")


def _url_secrets(url: str) -> list[str]:
    """The credentials a URL carries: its password, else its user name (a token passed as
    the user), and secret-named query values; as written and percent-decoded."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    user, sep, password = userinfo.partition(":")
    found = [password if sep else user]
    for item in parts.query.split("&"):
        name, sep, value = item.partition("=")
        if sep and is_secret_name(unquote(name)):
            found.append(value)
    return [variant for value in found for variant in (value, unquote(value))]


def _header_secrets(headers: Mapping[str, str]) -> list[str]:
    """Values of credential headers, and the credential after a scheme word (``Bearer
    KEY``: ``KEY`` too, which a server is likelier to echo than the whole value)."""
    found: list[str] = []
    for name, value in headers.items():
        if not is_secret_name(name):
            continue
        found.append(value)
        scheme, sep, credential = value.strip().partition(" ")
        if sep and scheme.isalpha():
            found.append(credential.strip())
    return found


@dataclass(frozen=True, slots=True)
class Scrubber:
    """Replaces a run's secret values in text. ``secrets`` are distinct, non-empty and
    longest first (so that ``Bearer KEY`` goes as a whole before ``KEY`` alone)."""

    secrets: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        *,
        headers: Mapping[str, str] | None = None,
        urls: Iterable[str] = (),
        values: Iterable[str | None] = (),
    ) -> Scrubber:
        """The secrets of credential ``headers``, of ``urls`` (user info, secret-named
        query values) and the plain ``values`` (e.g. an API key)."""
        found = [v for v in values if v]
        found += _header_secrets(headers or {})
        for url in urls:
            found += _url_secrets(url)
        distinct = {v for v in found if v.strip()}
        return cls(tuple(sorted(distinct, key=lambda v: (-len(v), v))))

    def scrub(self, text: str) -> str:
        """``text`` with every secret replaced by ``<redacted>``, and the start of one at
        its very end too (``_MIN_CUT`` characters or more): stored texts are cut to a
        length, which can cut through an echoed secret."""
        for secret in self.secrets:
            if secret not in text:
                continue
            if len(secret) >= _SHORT:
                text = text.replace(secret, REDACTED)
            else:
                alone = rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])"
                text = re.sub(alone, REDACTED, text)
        for secret in self.secrets:
            if len(secret) < _SHORT:
                continue
            for k in range(min(len(secret) - 1, len(text)), _MIN_CUT - 1, -1):
                if text.endswith(secret[:k]):
                    return text[:-k] + REDACTED
        return text

    def scrub_tree(self, value: object) -> object:
        """A JSON-like value (mappings, lists, strings, scalars) with every string in it,
        keys too, scrubbed: what a server or a trace file supplied and run.json keeps."""
        if not self.secrets:
            return value
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, Mapping):
            return {
                (self.scrub(k) if isinstance(k, str) else k): self.scrub_tree(v)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.scrub_tree(item) for item in value]
        return value

    def scrub_optional(self, text: str | None) -> str | None:
        """``scrub`` for a value that may be absent (a record's optional strings)."""
        return text if text is None or not self.secrets else self.scrub(text)
