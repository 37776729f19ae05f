"""The two Parquet tables of llm-loadgen, version 1: the workload (trace) and the run.

Column names are constants so that every other module refers to them by name.
This module imports pyarrow only. docs/formats.md describes every column.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

SCHEMA_VERSION: Final = 1
METADATA_KEY: Final = b"llm_loadgen"
"""File-level key whose value is a JSON object: schema_version, kind, provenance."""

# ---------------------------------------------------------------- workload table
REQUEST_ID: Final = "request_id"
ARRIVAL_S: Final = "arrival_s"
WORKLOAD: Final = "workload"
API: Final = "api"
INPUT_TOKENS: Final = "input_tokens"
OUTPUT_TOKENS: Final = "output_tokens"
PREFIX_BLOCKS: Final = "prefix_blocks"
IMAGES: Final = "images"
IMAGE_TOKENS: Final = "image_tokens"
PROMPT: Final = "prompt"
MESSAGES: Final = "messages"
SESSION_ID: Final = "session_id"
TURN: Final = "turn"
PARENT: Final = "parent"
"""The request id of the turn this one continues (same session) or branches from (a
sub-agent's first turn); null for a session's first turn and for single requests."""
BRANCH: Final = "branch"
"""How a sub-agent's first turn relates to its ``parent``: ``fork`` (continues the parent's
history, sharing its prefix) or ``spawn`` (starts fresh from a shared preamble); null for a
turn that continues its own session."""
THINK_S: Final = "think_s"
"""Seconds between the parent's reply and this turn (the user's or tool's time), for
closed-loop sessions (``loadgen replay --sessions closed``); null: 0."""
TOOLS: Final = "tools"
"""The request's tool definitions, a JSON array of OpenAI function tools
(``{"type": "function", "function": {"name": ...}}``), sent as the chat body's ``tools``;
null: none."""
SLO_TTFT_MS: Final = "slo_ttft_ms"
SLO_TPOT_MS: Final = "slo_tpot_ms"
TEMPERATURE: Final = "temperature"
TOP_P: Final = "top_p"
SEED: Final = "seed"
MIN_TOKENS: Final = "min_tokens"
IGNORE_EOS: Final = "ignore_eos"
SAMPLING_COLUMNS: Final = (TEMPERATURE, TOP_P, SEED, MIN_TOKENS, IGNORE_EOS)
"""Optional per-request body fields, sent as the row gives them (null: not sent, or the
run's default); ``min_tokens`` and ``ignore_eos`` are vLLM/SGLang extensions."""

API_CHAT: Final = "chat"
API_COMPLETIONS: Final = "completions"
API_RESPONSES: Final = "responses"
"""OpenAI's Responses API (``/v1/responses``), streamed as typed events."""
API_EMBEDDINGS: Final = "embeddings"
"""``/v1/embeddings``: not streamed; measured as latency and items per second."""
APIS: Final = frozenset({API_CHAT, API_COMPLETIONS, API_RESPONSES, API_EMBEDDINGS})
STREAMED_APIS: Final = frozenset({API_CHAT, API_COMPLETIONS, API_RESPONSES})
"""The APIs whose responses stream tokens (TTFT, TPOT and ITL apply)."""
BRANCH_FORK: Final = "fork"
BRANCH_SPAWN: Final = "spawn"
BRANCHES: Final = frozenset({BRANCH_FORK, BRANCH_SPAWN})

IMAGE_TYPE: Final = pa.struct([pa.field("width", pa.int32()), pa.field("height", pa.int32())])

TRACE_SCHEMA: Final = pa.schema(
    [
        pa.field(REQUEST_ID, pa.string(), nullable=False),
        pa.field(ARRIVAL_S, pa.float64(), nullable=False),
        pa.field(WORKLOAD, pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field(API, pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field(INPUT_TOKENS, pa.int32(), nullable=False),
        pa.field(OUTPUT_TOKENS, pa.int32(), nullable=False),
        pa.field(PREFIX_BLOCKS, pa.list_(pa.int64())),
        pa.field(IMAGES, pa.list_(IMAGE_TYPE)),
        pa.field(IMAGE_TOKENS, pa.int32()),
        pa.field(PROMPT, pa.string()),
        pa.field(MESSAGES, pa.string()),
        pa.field(SESSION_ID, pa.string()),
        pa.field(TURN, pa.int32()),
        pa.field(SLO_TTFT_MS, pa.float32()),
        pa.field(SLO_TPOT_MS, pa.float32()),
        pa.field(TEMPERATURE, pa.float64()),
        pa.field(TOP_P, pa.float64()),
        pa.field(SEED, pa.int64()),
        pa.field(MIN_TOKENS, pa.int32()),
        pa.field(IGNORE_EOS, pa.bool_()),
        pa.field(PARENT, pa.string()),
        pa.field(BRANCH, pa.dictionary(pa.int8(), pa.string())),
        pa.field(THINK_S, pa.float32()),
        pa.field(TOOLS, pa.string()),
    ]
)
TRACE_REQUIRED: Final = (REQUEST_ID, ARRIVAL_S, INPUT_TOKENS, OUTPUT_TOKENS)
"""Columns a trace file must have; the others are filled with defaults when absent."""

# ---------------------------------------------------------------- run table
RUN_ID: Final = "run_id"
TRACE_INDEX: Final = "trace_index"
X_REQUEST_ID: Final = "x_request_id"
WORKER: Final = "worker"
N_IMAGES: Final = "n_images"
WARMUP: Final = "warmup"
DRAIN: Final = "drain"
"""True for a request still in flight when ``--duration`` ended dispatching (the drain)."""
CONTEXT_TOKENS: Final = "context_tokens"
"""Tokens of the prompt carried over from the ``parent`` turn (the prefix blocks the two
share, in tokens); null for a request without a parent."""
DUE_NS: Final = "due_ns"
SENT_NS: Final = "sent_ns"
CONNECT_START_NS: Final = "connect_start_ns"
CONNECTED_NS: Final = "connected_ns"
REQUEST_WRITTEN_NS: Final = "request_written_ns"
HEADERS_NS: Final = "headers_ns"
FIRST_BYTE_NS: Final = "first_byte_ns"
FIRST_TOKEN_NS: Final = "first_token_ns"
FIRST_REASONING_NS: Final = "first_reasoning_ns"
END_NS: Final = "end_ns"
CHUNK_OFFSETS_US: Final = "chunk_offsets_us"
CHUNK_TOKENS: Final = "chunk_tokens"
REASONING_OFFSETS_US: Final = "reasoning_offsets_us"
PROMPT_TOKENS: Final = "prompt_tokens"
COMPLETION_TOKENS: Final = "completion_tokens"
CACHED_TOKENS: Final = "cached_tokens"
REASONING_TOKENS: Final = "reasoning_tokens"
OUTCOME: Final = "outcome"
HTTP_STATUS: Final = "http_status"
ERROR: Final = "error"
FINISH_REASON: Final = "finish_reason"
SERVER_QUEUE_MS: Final = "server_queue_ms"
SERVER_PREFILL_MS: Final = "server_prefill_ms"
SERVER_TRANSFER_MS: Final = "server_transfer_ms"
SERVER_FIRST_TOKEN_MS: Final = "server_first_token_ms"
SERVER_TTFT_MS: Final = "server_ttft_ms"
SERVER_DECODE_MS: Final = "server_decode_ms"
SERVER_INSTANCE: Final = "server_instance"
SERVER_SLIP_MS: Final = "server_slip_ms"
"""The simulator's own lateness: how much later than planned it wrote this response's
chunks (wall ms, the worst chunk); null from servers that do not say."""
SERVER_INFERENCE_MS: Final = "server_inference_ms"
"""The server's time on this request in the batch, prefill and decode together, where it
reports only that sum: TGI's ``x-inference-time`` header (non-streamed replies only)."""
ITEMS: Final = "items"
"""Embeddings returned (the length of the response's ``data``); null for the APIs that
generate text."""
SERVER_DECODE_WAIT_MS: Final = "server_decode_wait_ms"
"""Disaggregated serving: from the KV cache's arrival on the decode instance to that
instance's first step with the request (0 for a monolith); null from servers that do not
say (their ``server_first_token_ms`` then includes it)."""
TOOL_CALL_CHUNKS: Final = "tool_call_chunks"
"""Chunks of a chat stream whose delta carried ``tool_calls`` (OpenAI's streamed function
calls); they are output and are in ``chunk_offsets_us`` too (a tool call starts TTFT). 0
for a stream without tool calls; null where the client does not parse them (Responses
API, embeddings) and in runs recorded before the column existed."""
FIRST_TOOL_CALL_NS: Final = "first_tool_call_ns"
"""Arrival of the first tool-call chunk; null when there was none."""

OUTCOME_OK: Final = "ok"
OUTCOME_HTTP_ERROR: Final = "http_error"
OUTCOME_CONTEXT_EXCEEDED: Final = "context_exceeded"
"""An HTTP error refusing the prompt for its length (vLLM's and OpenAI's 400 "maximum
context length", llama.cpp's "exceeds the available context size")."""
OUTCOME_REJECTED: Final = "rejected"
"""An HTTP 429 or 503 by which the server refused the request on arrival for load
(admission control: the simulator's "rejected by admission control", TGI's "Model is
overloaded"): the server's policy, kept apart from other HTTP errors; not goodput."""
OUTCOME_TIMEOUT: Final = "timeout"
OUTCOME_CONNECT_ERROR: Final = "connect_error"
OUTCOME_DISCONNECT: Final = "disconnect"
OUTCOME_PROTOCOL_ERROR: Final = "protocol_error"
OUTCOME_CANCELLED: Final = "cancelled"
OUTCOMES: Final = (
    OUTCOME_OK,
    OUTCOME_HTTP_ERROR,
    OUTCOME_CONTEXT_EXCEEDED,
    OUTCOME_REJECTED,
    OUTCOME_TIMEOUT,
    OUTCOME_CONNECT_ERROR,
    OUTCOME_DISCONNECT,
    OUTCOME_PROTOCOL_ERROR,
    OUTCOME_CANCELLED,
)

RUN_SCHEMA: Final = pa.schema(
    [
        pa.field(RUN_ID, pa.string(), nullable=False),
        pa.field(TRACE_INDEX, pa.int64(), nullable=False),
        pa.field(REQUEST_ID, pa.string(), nullable=False),
        pa.field(X_REQUEST_ID, pa.string(), nullable=False),
        pa.field(WORKER, pa.int16(), nullable=False),
        pa.field(WORKLOAD, pa.string(), nullable=False),
        pa.field(API, pa.string(), nullable=False),
        pa.field(INPUT_TOKENS, pa.int32(), nullable=False),
        pa.field(OUTPUT_TOKENS, pa.int32(), nullable=False),
        pa.field(N_IMAGES, pa.int16(), nullable=False),
        pa.field(IMAGE_TOKENS, pa.int32()),
        pa.field(SESSION_ID, pa.string()),
        pa.field(SLO_TTFT_MS, pa.float32()),
        pa.field(SLO_TPOT_MS, pa.float32()),
        pa.field(WARMUP, pa.bool_(), nullable=False),
        pa.field(DUE_NS, pa.int64(), nullable=False),
        pa.field(SENT_NS, pa.int64()),
        pa.field(CONNECT_START_NS, pa.int64()),
        pa.field(CONNECTED_NS, pa.int64()),
        pa.field(REQUEST_WRITTEN_NS, pa.int64()),
        pa.field(HEADERS_NS, pa.int64()),
        pa.field(FIRST_BYTE_NS, pa.int64()),
        pa.field(FIRST_TOKEN_NS, pa.int64()),
        pa.field(FIRST_REASONING_NS, pa.int64()),
        pa.field(END_NS, pa.int64()),
        pa.field(CHUNK_OFFSETS_US, pa.list_(pa.int32()), nullable=False),
        pa.field(CHUNK_TOKENS, pa.list_(pa.int16())),
        pa.field(REASONING_OFFSETS_US, pa.list_(pa.int32()), nullable=False),
        pa.field(PROMPT_TOKENS, pa.int32()),
        pa.field(COMPLETION_TOKENS, pa.int32()),
        pa.field(CACHED_TOKENS, pa.int32()),
        pa.field(REASONING_TOKENS, pa.int32()),
        pa.field(OUTCOME, pa.string(), nullable=False),
        pa.field(HTTP_STATUS, pa.int16()),
        pa.field(ERROR, pa.string()),
        pa.field(FINISH_REASON, pa.string()),
        pa.field(SERVER_QUEUE_MS, pa.float64()),
        pa.field(SERVER_PREFILL_MS, pa.float64()),
        pa.field(SERVER_TRANSFER_MS, pa.float64()),
        pa.field(SERVER_FIRST_TOKEN_MS, pa.float64()),
        pa.field(SERVER_TTFT_MS, pa.float64()),
        pa.field(SERVER_DECODE_MS, pa.float64()),
        pa.field(SERVER_INSTANCE, pa.string()),
        pa.field(SERVER_SLIP_MS, pa.float64()),
        pa.field(SERVER_INFERENCE_MS, pa.float64()),
        pa.field(TURN, pa.int32()),
        pa.field(PARENT, pa.string()),
        pa.field(CONTEXT_TOKENS, pa.int32()),
        pa.field(DRAIN, pa.bool_(), nullable=False),
        pa.field(ITEMS, pa.int32()),
        pa.field(SERVER_DECODE_WAIT_MS, pa.float64()),
        pa.field(TOOL_CALL_CHUNKS, pa.int32()),
        pa.field(FIRST_TOOL_CALL_NS, pa.int64()),
    ]
)

# ---------------------------------------------------------------- server metrics table
SM_TS_NS: Final = "ts_ns"
"""Epoch ns on the run's clock: the midpoint of the scrape's request."""
SM_NAME: Final = "name"
"""Sample name as exposed (``vllm:num_requests_running``, ``..._bucket``, ``..._total``)."""
SM_LABELS: Final = "labels"
"""The sample's labels as a JSON object with sorted keys (``{}`` when none)."""
SM_VALUE: Final = "value"

SERVER_METRICS_SCHEMA: Final = pa.schema(
    [
        pa.field(SM_TS_NS, pa.int64(), nullable=False),
        pa.field(SM_NAME, pa.string(), nullable=False),
        pa.field(SM_LABELS, pa.string(), nullable=False),
        pa.field(SM_VALUE, pa.float64(), nullable=False),
    ]
)
"""One row per scraped Prometheus sample (``server_metrics.parquet``)."""

# ---------------------------------------------------------------- run directory
REQUESTS_FILE: Final = "requests.parquet"
PARTS_DIR: Final = "requests.parts"
"""Rows flushed during a run; merged into REQUESTS_FILE when the run closes."""
JOURNAL_FILE: Final = "journal.arrows"
"""Inside PARTS_DIR: an Arrow IPC stream of row batches, appended as the run goes and
readable up to its last complete batch if the process dies."""
DISPATCH_FILE: Final = "dispatched.i64"
"""Inside PARTS_DIR: the trace index of every request sent, 8 bytes each (little-endian
int64), written as each goes to the wire (``loadgen.dispatched``); deleted with the
journal when the run closes."""
RUN_LOCK: Final = "run.lock"
"""Held (``flock``) by every process of a replay while it runs; ``loadgen recover`` and the
analysing commands recover a run only when no process holds it."""
RUN_JSON: Final = "run.json"
SERVER_METRICS_FILE: Final = "server_metrics.parquet"
SWEEP_JSON: Final = "sweep.json"
"""A sweep directory's description: the trace, the mode and one entry per step (run
directory); written by ``loadgen sweep`` and by the offline engine's sweeps."""
SWEEP_KIND: Final = "llm-loadgen sweep"
SWEEP_VERSION: Final = 1
