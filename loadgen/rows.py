"""Builds a request's run row (``RunRow``) from its finished stream.

What ``loadgen.client`` knows when a request ends (the prepared job, the exchange's
``Progress``, the stream's ``StreamState`` and the outcome so far) becomes one row here.
Every value a row takes from the server is checked where it is built, so the recorder
never meets a row its columns cannot hold: the stream's summary checks JSON types,
``loadgen.fit`` the ranges of the columns. A value that fails is left out, the chunks
received are kept, and the request is a ``protocol_error`` naming the field. Strings from
the server are scrubbed of the credentials sent to it.

Part of the replay core: imports ``traces``, ``loadgen.http``, ``loadgen.stream`` and
``loadgen.openai`` only; never ``loadgen.sim``, ``loadgen.cli`` or analyzers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from loadgen.fit import fit_columns
from loadgen.http.stamping import Progress
from loadgen.openai.timings import ServerTimings
from loadgen.redact import Scrubber
from loadgen.stream.state import StreamState
from traces import schema as s
from traces.records import RunRow

if TYPE_CHECKING:
    from loadgen.client import PreparedRequest

_NO_TIMINGS = ServerTimings()
_TOOL_CALL_APIS = frozenset({s.API_CHAT, s.API_COMPLETIONS})
"""The APIs whose streamed chunks the client classifies for ``delta.tool_calls`` (a
completions stream has none: 0); the others record null."""
_UNFINISHED = {
    s.API_RESPONSES: "stream ended without response.completed or response.incomplete",
    s.API_EMBEDDINGS: "the embeddings reply ended before its body",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class RowBuilder:
    """The per-process part of every row (run, worker, how the server's strings are
    scrubbed, whether bodies were streamed); ``build`` adds one request's."""

    run_id: str
    worker: int
    scrubber: Scrubber
    stream: bool
    """False under ``--no-stream``: no chunk is classified for tool calls then (null)."""

    def build(
        self,
        job: PreparedRequest,
        due_ns: int,
        sent_ns: int,
        end_ns: int,
        progress: Progress,
        state: StreamState,
        outcome: str,
        error: str | None,
        header_timings: ServerTimings | None = None,
    ) -> RunRow:
        """The row of one finished (or cancelled) request: its outcome checked against
        what the stream carried (a ``protocol_error`` when a value fails its column or the
        stream did not finish), the server's strings scrubbed."""
        parsed = state.summary()
        fit = fit_columns(parsed, progress.status)
        if outcome == s.OUTCOME_OK:
            problem = parsed.error or fit.problem
            if problem is not None:
                outcome, error = s.OUTCOME_PROTOCOL_ERROR, problem
            elif not parsed.done and parsed.finish_reason is None:
                outcome, error = (
                    s.OUTCOME_PROTOCOL_ERROR,
                    _UNFINISHED.get(
                        job.trace.api, "stream ended without [DONE] or a finish_reason"
                    ),
                )
        req = job.trace
        usage = fit.usage
        timings = parsed.timings or header_timings or _NO_TIMINGS
        # Positional, in RECORD_FIELDS order (RunRow's): one name per line, checked by
        # tests/loadgen/test_row_build.py against the record built by name.
        return RunRow(
            self.run_id,  # run_id
            req.index,  # trace_index
            req.request_id,  # request_id
            job.x_request_id,  # x_request_id
            self.worker,  # worker
            req.workload,  # workload
            req.api,  # api
            req.input_tokens,  # input_tokens
            req.output_tokens,  # output_tokens
            len(req.images or ()),  # n_images
            req.image_tokens,  # image_tokens
            req.session_id,  # session_id
            req.slo_ttft_ms,  # slo_ttft_ms
            req.slo_tpot_ms,  # slo_tpot_ms
            job.warmup,  # warmup
            due_ns,  # due_ns
            progress.sent_ns if progress.sent_ns is not None else sent_ns,  # sent_ns
            progress.connect_start_ns,  # connect_start_ns
            progress.connected_ns,  # connected_ns
            progress.written_ns,  # request_written_ns
            progress.headers_ns,  # headers_ns
            progress.first_byte_ns,  # first_byte_ns
            parsed.first_token_ns,  # first_token_ns
            parsed.first_reasoning_ns,  # first_reasoning_ns
            end_ns,  # end_ns
            fit.content_offsets_us,  # chunk_offsets_us
            fit.chunk_tokens,  # chunk_tokens
            fit.reasoning_offsets_us,  # reasoning_offsets_us
            usage.prompt_tokens,  # prompt_tokens
            usage.completion_tokens,  # completion_tokens
            usage.cached_tokens,  # cached_tokens
            usage.reasoning_tokens,  # reasoning_tokens
            outcome,  # outcome
            fit.status,  # http_status
            self.scrubber.scrub_optional(error),  # error
            self.scrubber.scrub_optional(parsed.finish_reason),  # finish_reason
            timings.queue_ms,  # server_queue_ms
            timings.prefill_ms,  # server_prefill_ms
            timings.transfer_ms,  # server_transfer_ms
            timings.first_token_ms,  # server_first_token_ms
            timings.ttft_ms,  # server_ttft_ms
            timings.decode_ms,  # server_decode_ms
            self.scrubber.scrub_optional(timings.instance),  # server_instance
            timings.slip_ms,  # server_slip_ms
            timings.inference_ms,  # server_inference_ms
            req.turn,  # turn
            req.parent,  # parent
            job.context_tokens,  # context_tokens
            False,  # drain (the replay sets it: loadgen.replay)
            parsed.items,  # items
            timings.decode_wait_ms,  # server_decode_wait_ms
            (  # tool_call_chunks
                parsed.tool_call_chunks if self.stream and req.api in _TOOL_CALL_APIS else None
            ),
            parsed.first_tool_call_ns,  # first_tool_call_ns
        )
