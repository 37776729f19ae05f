"""Live session history (``--history live``): a turn's chat messages built from what was
actually exchanged instead of the trace's synthetic history.

A request without a parent (a session's first turn, a spawned sub-agent that starts fresh)
sends its trace prompt as one user message. A later turn, or a forked sub-agent, sends its
parent's messages as they were sent, the server's reply to them as the assistant message,
and a new user message: the turn's own part of the prompt, its tokens beyond the parent's
prompt and reply (synthetic text seeded by its request id; a literal ``messages`` row's
last message, a literal ``prompt`` as it is). So the history grows by what the server
said, as a real conversation does, and a prefix cache sees the real shared prefix; the
row's ``input_tokens`` stays the trace's (the server's ``prompt_tokens`` says what was
sent).

Each request's messages are kept until every turn that waits for it has been built, then
dropped. Chat only: a ``completions`` row keeps the trace's history. Imports ``traces`` and
``loadgen.sessions`` only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import orjson

from loadgen.sessions import NONE, SessionPlan
from traces import schema as s
from traces.prompts.maker import PromptMaker
from traces.records import TraceRequest

Message = dict[str, str]


class LiveHistory:
    """Builds each request's live messages; one per replay (loop-local, not thread-safe)."""

    def __init__(self, prompts: PromptMaker, plan: SessionPlan) -> None:
        self._prompts = prompts
        self._plan = plan
        self._sent: dict[int, list[Message]] = {}
        self._waiting = [len(f) for f in plan.followers]

    def keeps_reply(self, position: int) -> bool:
        """Whether request ``position``'s reply is needed (a turn waits for it)."""
        return bool(self._plan.followers[position])

    def request(
        self, requests: Sequence[TraceRequest], position: int, reply: str | None
    ) -> TraceRequest:
        """Request ``position`` with its live messages (``reply``: its parent's reply,
        None for a request without a parent)."""
        req = requests[position]
        if req.api != s.API_CHAT:
            return req
        parent = self._plan.waits_for[position]
        if parent == NONE or req.branch == s.BRANCH_SPAWN or reply is None:
            messages = self._opening(req)
        else:
            before = self._sent.get(parent)
            messages = (
                self._opening(req)
                if before is None
                else self._continued(req, requests[parent], before, reply)
            )
        if parent != NONE:
            self._waiting[parent] -= 1
            if self._waiting[parent] <= 0:
                self._sent.pop(parent, None)
        if self._waiting[position] > 0:
            self._sent[position] = messages
        return dataclasses.replace(req, messages=orjson.dumps(messages).decode(), prompt=None)

    def _opening(self, req: TraceRequest) -> list[Message]:
        if req.messages is not None:
            loaded = orjson.loads(req.messages)
            return [m for m in loaded if isinstance(m, dict)]
        text = req.prompt if req.prompt is not None else self._prompts.text(req)
        return [{"role": "user", "content": text}]

    def _continued(
        self, req: TraceRequest, parent: TraceRequest, before: list[Message], reply: str
    ) -> list[Message]:
        if req.messages is not None:
            loaded = [m for m in orjson.loads(req.messages) if isinstance(m, dict)]
            new = loaded[-1:] if loaded else [{"role": "user", "content": ""}]
        elif req.prompt is not None:
            new = [{"role": "user", "content": req.prompt}]
        else:
            # Its own part only (text seeded by its request id, as the trace's would be
            # past its blocks): never the whole prompt built to take its tail.
            tokens = max(1, req.input_tokens - parent.input_tokens - parent.output_tokens)
            own = dataclasses.replace(req, input_tokens=tokens, prefix_blocks=None)
            new = [{"role": "user", "content": self._prompts.text(own)}]
        return [*before, {"role": "assistant", "content": reply}, *new]
