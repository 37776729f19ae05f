"""``--base-url`` checks: a URL that cannot be an endpoint is bad input (exit 2, not an
unreachable endpoint), and a failed probe of a base URL without ``/v1`` says to add it."""

from __future__ import annotations

from urllib.parse import urlsplit

import click

from traces.errors import UserError


def check_base_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The ``--base-url`` callback: an http(s) URL with a host, else a usage error."""
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise click.BadParameter(
            f"{value!r} is not an http(s) URL, e.g. http://127.0.0.1:8000/v1", ctx, param
        )
    return value


def lacks_v1(base_url: str) -> bool:
    """True when the URL's path has no ``/v1`` segment (OpenAI-compatible servers serve there)."""
    return "v1" not in urlsplit(base_url).path.strip("/").split("/")


def with_v1_hint(exc: UserError, base_url: str) -> UserError:
    """``exc`` with a hint to add ``/v1`` when the base URL lacks it and the endpoint failed
    (exit 4): a server at ``http://host:8000`` answers 404 to ``/models``."""
    if exc.exit_code == 4 and lacks_v1(base_url):
        exc.args = (f"{exc} (hint: try --base-url {base_url.rstrip('/')}/v1)",)
    return exc
