"""Endpoint preflight: is it reachable, which model, and which optional fields it accepts.

Run once before a replay; failures become one-line ``EndpointError``s (exit code 4),
with the URL's user info and every credential sent (``loadgen.redact``) taken out of the
message, whatever the server echoed.
With ``--calibrate-prompts`` it also measures the server's tokens per word.
Optional fields are found by trying the richest request first and dropping extras on a
400, so a run never fails over a field the server does not support.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from loadgen.errors import EndpointError
from loadgen.openai.bodies import build_body, endpoint_path
from loadgen.redact import Scrubber, redact_url
from loadgen.run.deployment import discover_deployment, model_card
from traces.deployment import DeploymentInfo
from traces.prompts.maker import CalibrationSample, Prompt, PromptMaker
from traces.records import TraceRequest
from traces.runinfo import Capabilities
from traces.schema import API_CHAT, API_EMBEDDINGS, API_RESPONSES

_PROBE_TRIES = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointInfo:
    """What the preflight learnt about the endpoint (``deployment``: what it tells of its
    deployment, ``loadgen.run.deployment``)."""

    model: str
    served_models: tuple[str, ...]
    capabilities: Capabilities
    deployment: DeploymentInfo | None = None


def _error_message(response: httpx.Response) -> str:
    try:
        obj = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return " ".join(response.text.split())[:200]
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message", err))[:200]
        return str(err)[:200]
    return str(obj)[:200]


def _without_secrets(
    exc: EndpointError, http: httpx.AsyncClient, base_url: str, headers: Mapping[str, str]
) -> EndpointError:
    """``exc`` as it may be printed: the base URL redacted, credentials scrubbed."""
    base = base_url.rstrip("/")
    scrubber = Scrubber.of(headers={**http.headers, **headers}, urls=[base_url])
    return EndpointError(scrubber.scrub(str(exc).replace(base, redact_url(base))))


async def preflight(
    http: httpx.AsyncClient,
    *,
    base_url: str,
    model: str | None,
    api: str,
    headers: Mapping[str, str],
    x_request_id: str,
    extra: Mapping[str, Any] | None = None,
    tools: str | None = None,
) -> EndpointInfo:
    """Check the endpoint and detect capabilities with a one-token streaming probe, which
    carries ``extra`` (``--extra-body``) and ``tools`` (a chat run's first tool definitions,
    JSON text) too, as the run's requests will: a server that refuses them fails here, and
    a ``tool_choice`` in ``extra`` has the tools it needs."""
    try:
        return await _preflight(
            http,
            base_url=base_url,
            model=model,
            api=api,
            headers=headers,
            x_request_id=x_request_id,
            extra=extra,
            tools=tools,
        )
    except EndpointError as exc:
        # Not chained: the cause's text may hold what was just scrubbed.
        raise _without_secrets(exc, http, base_url, headers) from None


async def _preflight(
    http: httpx.AsyncClient,
    *,
    base_url: str,
    model: str | None,
    api: str,
    headers: Mapping[str, str],
    x_request_id: str,
    extra: Mapping[str, Any] | None,
    tools: str | None,
) -> EndpointInfo:
    base = base_url.rstrip("/")
    served: tuple[str, ...] = ()
    models_doc: object = None
    try:
        resp = await http.get(base + "/models", headers=dict(headers))
    except httpx.HTTPError as exc:
        raise EndpointError(f"{base}: unreachable ({type(exc).__name__}: {exc})") from exc
    if resp.status_code in (401, 403):
        raise EndpointError(f"{base}: the endpoint rejects the API key (HTTP {resp.status_code})")
    if resp.status_code == 200:
        try:
            models_doc = orjson.loads(resp.content)
            data = models_doc.get("data", []) if isinstance(models_doc, dict) else []
            served = tuple(str(m["id"]) for m in data if isinstance(m, dict) and "id" in m)
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            served = ()
    if model is None:
        if not served:
            raise EndpointError(f"{base}/models lists no model; pass --model")
        model = served[0]
    elif served and model not in served:
        raise EndpointError(
            f"{base}: model {model!r} is not served (available: {', '.join(served)})"
        )
    attempts = (
        Capabilities(),
        Capabilities().without_extras(),
        Capabilities(include_usage=False).without_extras(),
    )
    last = ""
    for caps in attempts:
        r = await _probe(http, base, api, model, caps, headers, x_request_id, extra, tools)
        if r.status_code < 400:
            deployment = await discover_deployment(
                http, base_url=base, card=model_card(models_doc, model), headers=headers
            )
            return EndpointInfo(
                model=model, served_models=served, capabilities=caps, deployment=deployment
            )
        last = f"HTTP {r.status_code}: {_error_message(r)}"
        if r.status_code in (401, 403):
            raise EndpointError(f"{base}: the endpoint rejects the API key ({last})")
        if r.status_code == 404:
            raise EndpointError(f"{base}{endpoint_path(api)}: not found ({last})")
        if r.status_code != 400 and r.status_code != 422:
            break
    raise EndpointError(f"{base}: the probe request was refused ({last})")


async def _probe(
    http: httpx.AsyncClient,
    base: str,
    api: str,
    model: str,
    caps: Capabilities,
    headers: Mapping[str, str],
    x_request_id: str,
    extra: Mapping[str, Any] | None = None,
    tools: str | None = None,
) -> httpx.Response:
    """One one-token probe; retried a few times on 429/5xx or a dropped stream, which are
    the server's transient state rather than a verdict on the request's fields."""
    body = build_body(
        api=api,
        model=model,
        prompt=Prompt(text="ping"),
        max_tokens=1,
        caps=caps,
        extra=extra,
        tools=tools,
    )
    url = base + endpoint_path(api)
    for attempt in range(_PROBE_TRIES):
        # A fresh id per try: servers (and the simulator) may decide faults per request id.
        probe_headers = {
            **headers,
            "content-type": "application/json",
            "x-request-id": f"{x_request_id}-{attempt}",
        }
        try:
            async with http.stream("POST", url, content=body, headers=probe_headers) as r:
                await r.aread()
        except httpx.ConnectError as exc:
            raise EndpointError(f"{base}: unreachable ({type(exc).__name__}: {exc})") from exc
        except httpx.HTTPError as exc:
            if attempt + 1 == _PROBE_TRIES:
                raise EndpointError(
                    f"{url}: probe request failed ({type(exc).__name__}: {exc})"
                ) from exc
            await asyncio.sleep(0.1 * (attempt + 1))
            continue
        if (r.status_code == 429 or r.status_code >= 500) and attempt + 1 < _PROBE_TRIES:
            await asyncio.sleep(0.1 * (attempt + 1))
            continue
        return r
    raise AssertionError("unreachable")


CALIBRATION_WORDS = (32, 256, 1024)
"""Prompt lengths (in words) sent to measure the server's tokens per word."""


async def calibration_samples(
    http: httpx.AsyncClient,
    *,
    base_url: str,
    model: str,
    api: str,
    prompts: PromptMaker,
    x_request_id: str,
) -> list[CalibrationSample]:
    """Send prompts of known word counts (max_tokens 1, not streamed) and read back the
    server's ``usage.prompt_tokens`` for each: the data of the ``calibrated`` strategy."""
    try:
        return await _calibration_samples(
            http,
            base_url=base_url,
            model=model,
            api=api,
            prompts=prompts,
            x_request_id=x_request_id,
        )
    except EndpointError as exc:
        raise _without_secrets(exc, http, base_url, {}) from None


async def _calibration_samples(
    http: httpx.AsyncClient,
    *,
    base_url: str,
    model: str,
    api: str,
    prompts: PromptMaker,
    x_request_id: str,
) -> list[CalibrationSample]:
    base = base_url.rstrip("/")
    samples: list[CalibrationSample] = []
    for i, words in enumerate(CALIBRATION_WORDS):
        req = TraceRequest(
            index=i, request_id=f"calibrate-{i}", arrival_s=0.0, api=api,
            input_tokens=words, output_tokens=1,
        )  # fmt: skip
        text = prompts.text(req)
        payload: dict[str, object] = {"model": model, "max_tokens": 1, "stream": False}
        if api == API_CHAT:
            payload["messages"] = [{"role": "user", "content": text}]
        elif api == API_RESPONSES:
            payload = {"model": model, "max_output_tokens": 1, "input": text}
        elif api == API_EMBEDDINGS:
            payload = {"model": model, "input": text}
        else:
            payload["prompt"] = text
        body = orjson.dumps(payload)
        headers = {"content-type": "application/json", "x-request-id": f"{x_request_id}-{i}"}
        try:
            r = await http.post(base + endpoint_path(api), content=body, headers=headers)
        except httpx.HTTPError as exc:
            raise EndpointError(f"{base}: prompt calibration failed ({exc})") from exc
        if r.status_code >= 400:
            raise EndpointError(
                f"{base}: prompt calibration refused (HTTP {r.status_code}: {_error_message(r)})"
            )
        try:
            usage = orjson.loads(r.content).get("usage") or {}
            tokens = int(usage["input_tokens" if api == API_RESPONSES else "prompt_tokens"])
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
            raise EndpointError(
                f"{base}: prompt calibration needs usage.prompt_tokens in the response"
            ) from exc
        samples.append(CalibrationSample(words=len(text.split()), prompt_tokens=tokens))
    return samples
