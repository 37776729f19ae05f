"""Turns trace rows into ready-to-send requests (prompt text, images, JSON body).

Runs before a request is due, so the event loop never builds a large body or encodes an
image at send time: requests carrying images are prepared in a worker thread, and a trace
with images or huge prompts has its bodies built ahead in a process of their own
(``loadgen.prepare.ahead``), which hands them to ``prepare`` as ``body``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from loadgen.client import Body, PreparedRequest
from loadgen.openai.bodies import BodyRecipe, endpoint_path
from traces.prompts.maker import PromptMaker
from traces.records import TraceRequest
from traces.runinfo import Capabilities


@dataclass(frozen=True, slots=True, kw_only=True)
class Preparer:
    """Builds ``PreparedRequest``s for one run."""

    prompts: PromptMaker
    model: str
    run_id: str
    capabilities: Capabilities
    warmup_requests: int = 0
    extra_body: Mapping[str, Any] | None = None
    """``--extra-body``: merged into every body (checked by ``extra_body_problem``)."""
    stream: bool = True
    """False with ``--no-stream``: one JSON response per request, no SSE."""
    embed_batch: int = 1
    """Inputs per embeddings request (``--embed-batch``)."""
    recipe: BodyRecipe = field(init=False, repr=False, compare=False)
    """How this run's bodies are built (what the body preparer's process is given): made
    once from the fields above, not per request."""

    def __post_init__(self) -> None:
        recipe = BodyRecipe(
            prompts=self.prompts,
            model=self.model,
            capabilities=self.capabilities,
            extra_body=self.extra_body,
            stream=self.stream,
            embed_batch=self.embed_batch,
        )
        object.__setattr__(self, "recipe", recipe)  # frozen: set once, here

    def x_request_id(self, req: TraceRequest) -> str:
        """The join key sent as ``X-Request-Id``: run id plus the trace's request id."""
        return f"{self.run_id}-{req.request_id}"

    def body(self, req: TraceRequest) -> bytes:
        """The JSON body of ``req``: its prompt (and images) materialised."""
        return self.recipe.build(req)

    def prepare(
        self,
        req: TraceRequest,
        ordinal: int,
        *,
        warmup: bool = False,
        context_tokens: int | None = None,
        keep_reply: bool = False,
        body: Body | None = None,
    ) -> PreparedRequest:
        """Build one request; ``ordinal`` is its dispatch order (warm-up flags the first ones,
        and ``warmup`` any other: one due in the warm-up time); ``context_tokens`` goes to
        its row. ``body``: its body, built already (``loadgen.prepare.ahead``)."""
        return PreparedRequest(
            trace=req,
            x_request_id=self.x_request_id(req),
            path=endpoint_path(req.api),
            body=self.body(req) if body is None else body,
            warmup=warmup or ordinal < self.warmup_requests,
            context_tokens=context_tokens,
            keep_reply=keep_reply,
        )

    async def prepare_async(
        self,
        req: TraceRequest,
        ordinal: int,
        *,
        warmup: bool = False,
        context_tokens: int | None = None,
        keep_reply: bool = False,
        body: Body | None = None,
    ) -> PreparedRequest:
        """``prepare``, off the event loop when the request carries images (and its
        ``body`` was not built ahead)."""
        build = partial(
            self.prepare,
            warmup=warmup,
            context_tokens=context_tokens,
            keep_reply=keep_reply,
            body=body,
        )
        if req.images and body is None:
            return await asyncio.to_thread(build, req, ordinal)
        return build(req, ordinal)
