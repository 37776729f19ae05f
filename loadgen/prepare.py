"""Turns trace rows into ready-to-send requests (prompt text, images, JSON body).

Runs before a request is due, so the event loop never builds a large body or encodes an
image at send time; requests carrying images are prepared in a worker thread.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from loadgen.client import PreparedRequest
from loadgen.openai.bodies import build_body, endpoint_path
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
    embed_batch: int = 1
    """Inputs per embeddings request (``--embed-batch``)."""

    def x_request_id(self, req: TraceRequest) -> str:
        """The join key sent as ``X-Request-Id``: run id plus the trace's request id."""
        return f"{self.run_id}-{req.request_id}"

    def prepare(self, req: TraceRequest, ordinal: int) -> PreparedRequest:
        """Build one request; ``ordinal`` is its dispatch order (warm-up flags the first ones)."""
        prompt = self.prompts.make(req)
        body = build_body(
            api=req.api,
            model=self.model,
            prompt=prompt,
            max_tokens=req.output_tokens,
            caps=self.capabilities,
            embed_batch=self.embed_batch,
        )
        return PreparedRequest(
            trace=req,
            x_request_id=self.x_request_id(req),
            path=endpoint_path(req.api),
            body=body,
            warmup=ordinal < self.warmup_requests,
        )

    async def prepare_async(self, req: TraceRequest, ordinal: int) -> PreparedRequest:
        """``prepare``, off the event loop when the request carries images."""
        if req.images:
            return await asyncio.to_thread(self.prepare, req, ordinal)
        return self.prepare(req, ordinal)
