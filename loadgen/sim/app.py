"""The simulator's raw ASGI application: routing, request bodies, response writing.

Routes: ``GET /health``, ``GET /v1/models``, ``POST /v1/completions``,
``POST /v1/chat/completions``, ``POST /v1/responses`` (the Responses API's typed events,
:mod:`loadgen.sim.responses`), ``POST /v1/embeddings`` (one step of prefill, then the
whole reply), ``GET /metrics``, ``GET /debug/requests/{x_request_id}``.
Unknown paths answer 404, wrong methods 405, bad bodies 400, an unknown model 404, all with
OpenAI-style ``{"error": {...}}`` bodies. Timing belongs to the engine
(:mod:`loadgen.sim.engine`); this module stamps each content chunk immediately before its
``send`` and writes it (:mod:`loadgen.sim.response`). A dropped connection (fault) is
raised as :class:`DroppedConnection`, which makes uvicorn close the transport without the
terminating chunk. Every generation response carries ``x-sim-time-scale`` (wall seconds per
model second; ``/v1/models`` reports it too), so a harness can convert.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any, TypeVar

import orjson

from loadgen.errors import DroppedConnection, RequestError
from loadgen.sim.chunks import ResponseFormatter, error_body, models_body
from loadgen.sim.config import SimConfig, engine_deployment
from loadgen.sim.engine import Engine, FixedDelayEngine, Stall
from loadgen.sim.faults import FaultInjector, FaultKind
from loadgen.sim.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from loadgen.sim.metrics import SimMetrics
from loadgen.sim.records import RequestLog
from loadgen.sim.request import Api, parse_request
from loadgen.sim.response import JSON_TYPE, ResponseWriter
from loadgen.sim.responses import ResponsesFormatter

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
T = TypeVar("T")

_JSON = JSON_TYPE
_API_PATHS: dict[str, Api] = {
    "/v1/completions": "completions",
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/embeddings": "embeddings",
}
_GET_PATHS = frozenset({"/health", "/v1/models", "/metrics"})
_DEBUG_PREFIX = "/debug/requests/"


class SimApp:
    """An ASGI 3 application serving one :class:`Engine` under one :class:`SimConfig`."""

    def __init__(self, config: SimConfig, *, engine: Engine | None = None) -> None:
        self.config = config
        self.engine: Engine = engine if engine is not None else _default_engine(config)
        self.metrics = SimMetrics(self.engine, model_name=config.served_model_name)
        self.log = RequestLog(config.max_records)
        self._faults = FaultInjector(config)
        self._counter = itertools.count(1)
        self._created = int(time.time())  # wall clock: OpenAI's "created" Unix seconds
        self._started_ns = time.perf_counter_ns()
        scale = self.engine.time_scale
        self._scale_header = (b"x-sim-time-scale", f"{scale:g}".encode())
        self._models_meta = _models_meta(config, scale, getattr(self.engine, "max_model_len", None))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        started = False
        try:
            async with self.engine.running():
                started = True
                self._started_ns = time.perf_counter_ns()
                await send({"type": "lifespan.startup.complete"})
                await receive()  # lifespan.shutdown
        except Exception as exc:
            phase = "shutdown" if started else "startup"
            await send({"type": f"lifespan.{phase}.failed", "message": repr(exc)})
            return
        await send({"type": "lifespan.shutdown.complete"})

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method: str = scope["method"]
        path: str = scope["path"]
        api = _API_PATHS.get(path)
        if api is not None:
            if method != "POST":
                await _error(send, 405, f"method {method} not allowed", "MethodNotAllowed")
            else:
                await self._generate(scope, receive, send, api)
            return
        if path in _GET_PATHS or path.startswith(_DEBUG_PREFIX):
            if method not in ("GET", "HEAD"):
                await _error(send, 405, f"method {method} not allowed", "MethodNotAllowed")
            elif path == "/health":
                await _respond(send, 200, b"", content_type=b"text/plain")
            elif path == "/v1/models":
                body = models_body(
                    self.config.served_model_name, created=self._created, meta=self._models_meta
                )
                await _respond(send, 200, body)
            elif path == "/metrics":
                body = self.metrics.exposition()
                await _respond(send, 200, body, content_type=METRICS_CONTENT_TYPE.encode())
            else:
                record = self.log.get(path[len(_DEBUG_PREFIX) :])
                if record is None:
                    await _error(send, 404, f"no record of request {path!r}", "NotFoundError")
                else:
                    await _respond(send, 200, record.to_json())
            return
        await _error(send, 404, f"no route for {method} {path}", "NotFoundError")

    async def _generate(self, scope: Scope, receive: Receive, send: Send, api: Api) -> None:
        self.metrics.received()  # first: a request whose body never comes counts too
        cfg = self.config
        raw_id = _header(scope, b"x-request-id")
        request_id = raw_id.decode("latin-1") if raw_id else f"sim-{next(self._counter)}"
        if self._faults.accept_delays(request_id):
            self.metrics.fault("accept_delay")
            await asyncio.sleep(cfg.accept_delay_ms / 1e3)  # slow accept: ms grain is enough
        raw = await _read_body(receive)
        received_ns = time.perf_counter_ns()
        if raw is None:
            return  # the client went away before sending its whole body
        id_header = [(b"x-request-id", request_id.encode("latin-1")), self._scale_header]
        if received_ns - self._started_ns < cfg.loading_s * 1e9:
            self.metrics.fault("loading")
            headers = [*id_header, (b"retry-after", b"1")]
            await _error(send, 503, "model is loading (simulated)", "ServiceUnavailable", headers)
            return
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            await _error(send, 400, f"invalid JSON body: {exc}", "BadRequestError", id_header)
            return
        try:
            request = parse_request(
                doc,
                api=api,
                image_tokens=cfg.image_tokens,
                default_max_tokens=cfg.default_max_tokens,
            )
            request = self.engine.prepare(request, doc)
        except RequestError as exc:
            await _error(send, 400, str(exc), "BadRequestError", id_header, param=exc.param)
            return
        if request.model is not None and request.model != cfg.served_model_name:
            message = f"The model `{request.model}` does not exist."
            await _error(send, 404, message, "NotFoundError", id_header, param="model")
            return

        record = self.log.start(
            request_id, received_ns=received_ns, prompt_tokens=request.prompt_tokens
        )
        plan = self._faults.decide(request_id)
        if plan.kind is FaultKind.RATE_LIMITED:
            record.outcome = "rate_limited"
            self.metrics.fault("rate_limited")
            headers = [*id_header, (b"retry-after", b"1")]
            await _error(send, 429, "rate limited (simulated)", "RateLimitError", headers)
            return
        if plan.kind is FaultKind.ERROR:
            record.outcome = "error"
            self.metrics.fault("error")
            await _error(send, 500, "internal error (simulated)", "InternalServerError", id_header)
            return

        stall = None
        if plan.stall:
            self.metrics.fault("stall")
            chunks = -(-request.max_tokens // cfg.tokens_per_chunk)
            stall = Stall(from_chunk=chunks // 2, stall_ns=round(cfg.stall_ms * 1e6))
        drop_after = request.max_tokens // 2 if plan.kind is FaultKind.DROP else None
        malformed_at = None
        if plan.malformed:
            self.metrics.fault("malformed")
            malformed_at = -(-request.max_tokens // cfg.tokens_per_chunk) // 2
        response = ResponseWriter(
            engine=self.engine,
            metrics=self.metrics,
            send=send,
            request=request,
            record=record,
            formatter=(ResponsesFormatter if api == "responses" else ResponseFormatter)(
                request, model=cfg.served_model_name, request_id=request_id
            ),
            headers=id_header,
            drop_after=drop_after,
            malformed_at=malformed_at,
            tgi_headers=cfg.tgi_headers,
        )
        # Admission control last, right before the engine takes the request: what it lets
        # in is reserved in its queue until submitted.
        admission = getattr(self.engine, "admission_refusal", None)
        why = admission(request) if admission is not None else None
        if isinstance(why, str):
            record.outcome = "rejected"
            self.metrics.fault("admission_rejected")
            headers = [*id_header, (b"retry-after", b"1")]
            await _error(send, 429, why, "TooManyRequests", headers)
            return
        emissions = self.engine.generate(request, received_ns=received_ns, stall=stall)
        if api == "embeddings":
            write = response.embeddings(emissions, cfg.served_model_name)
        elif request.stream:
            write = response.stream(emissions)
        else:
            write = response.whole(emissions)
        try:
            outcome = await _unless_disconnected(receive, write)
        finally:
            done = getattr(self.engine, "admission_done", None)
            if done is not None:
                done(request)
        if outcome is None:
            record.outcome = "client_disconnected"
        elif outcome == "dropped":
            record.outcome = "dropped"
            self.metrics.fault("drop")
            raise DroppedConnection(f"request {request_id}: connection dropped (simulated)")
        else:
            record.outcome = outcome


async def _unless_disconnected(receive: Receive, work: Coroutine[Any, Any, T]) -> T | None:
    """Run ``work`` until done, or cancel it and return None if the client disconnects."""
    async with asyncio.TaskGroup() as group:
        worker = group.create_task(work)
        watcher = group.create_task(_cancel_on_disconnect(receive, worker))
        await asyncio.wait({worker})
        watcher.cancel()
    # The worker is cancelled only by the watcher; our own cancellation propagates above.
    return None if worker.cancelled() else worker.result()


async def _cancel_on_disconnect(receive: Receive, task: asyncio.Task[Any]) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            task.cancel()
            return


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None if the client disconnected first."""
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    *,
    content_type: bytes = _JSON,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    all_headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        *(headers or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _error(
    send: Send,
    status: int,
    message: str,
    kind: str,
    headers: list[tuple[bytes, bytes]] | None = None,
    *,
    param: str | None = None,
) -> None:
    body = error_body(message, kind=kind, code=status, param=param)
    await _respond(send, status, body, headers=headers)


def _default_engine(config: SimConfig) -> Engine:
    if config.engine is None:
        return FixedDelayEngine(config)
    from loadgen.sim.topology import PhysicsEngine  # deferred: the budget model is not free

    return PhysicsEngine(config)


def _models_meta(config: SimConfig, scale: float, max_model_len: object) -> dict[str, object]:
    """The simulator's own ``/v1/models`` card fields: engine, time scale, deployment (also
    as ``sim_deployment_spec``, the ``deployment.toml`` layout: ``traces.deployment``), and
    vLLM's ``max_model_len`` where the engine has a context limit."""
    meta: dict[str, object] = {"sim_time_scale": scale}
    limit = max_model_len if isinstance(max_model_len, int) else None
    if limit is not None:
        meta["max_model_len"] = limit
    spec = config.engine
    if spec is None:
        meta["sim_engine"] = "fixed-delay"
        return meta
    meta["sim_engine"] = "physics"
    meta["sim_deployment"] = {
        "model": spec.model,
        "gpu": spec.gpu,
        "topology": spec.topology,
        "gpus": spec.gpus,
        "replicas": spec.replicas,
        "prefill": [spec.prefill_instances, spec.prefill_gpus],
        "decode": [spec.decode_instances, spec.decode_gpus],
        "link_gbps": spec.link_gbps,
        "max_num_seqs": spec.max_num_seqs,
        "max_batched_tokens": spec.max_batched_tokens,
        "kv_block_size": spec.kv_block_size,
        "prefix_cache": spec.prefix_cache,
    }
    # The whole deployment in the deployment.toml layout, read by the replay's preflight.
    meta["sim_deployment_spec"] = engine_deployment(spec, max_model_len=limit).nested()
    return meta
