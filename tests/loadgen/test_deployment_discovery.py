"""The preflight's look at the endpoint's deployment, against a real loopback server
that answers like vLLM (a model card with max_model_len, cache_config_info on /metrics,
no /props), and the label parsing of vLLM's info metric and llama.cpp's /props."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import orjson
import pytest

from loadgen.run.deployment import (
    LLAMACPP_PROPS,
    MODELS_CARD,
    VLLM_CACHE,
    discover_deployment,
    llamacpp_facts,
    model_card,
    vllm_cache_facts,
)
from traces.deployment import DeploymentInfo

pytestmark = pytest.mark.serial

VLLM_METRICS = (
    b"# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    b"# TYPE vllm:cache_config_info gauge\n"
    b'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",'
    b'gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="27153",'
    b'swap_space="4"} 1.0\n'
    b"# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    b"# TYPE vllm:num_requests_running gauge\n"
    b'vllm:num_requests_running{model_name="m"} 0.0\n'
)
MODELS = orjson.dumps(
    {"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 8192}]}
)


class _VllmLike(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = {"/v1/models": MODELS, "/metrics": VLLM_METRICS}.get(self.path)
        self.send_response(404 if body is None else 200)
        self.send_header("content-length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, format: str, *args: object) -> None:
        return


@contextmanager
def vllm_like() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _VllmLike)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_a_vllm_like_server_tells_its_cache_config_and_context() -> None:
    async def ask(base: str) -> object:
        async with httpx.AsyncClient() as http:
            card = model_card(orjson.loads(MODELS), "m")
            return await discover_deployment(http, base_url=base, card=card, headers={})

    with vllm_like() as base:
        info = asyncio.run(ask(base))
    assert isinstance(info, DeploymentInfo)
    facts = {f.key: (f.value, f.source) for f in info.facts}
    assert facts["max_model_len"] == (8192, MODELS_CARD)
    assert facts["scheduler.block_size"] == (16, VLLM_CACHE)
    assert facts["scheduler.kv_capacity_tokens"] == (27153 * 16, VLLM_CACHE)
    assert facts["scheduler.prefix_caching"] == (True, VLLM_CACHE)
    assert facts["efficiency.memory_fraction"] == (0.9, VLLM_CACHE)
    assert [(g.source, g.reason) for g in info.unavailable] == [(LLAMACPP_PROPS, "HTTP 404")]
    spec = info.spec()
    assert spec.engine == "vllm"
    assert spec.scheduler.block_size == 16


def test_an_unreachable_server_leaves_every_fact_unknown_with_why() -> None:
    async def ask() -> object:
        async with httpx.AsyncClient() as http:
            return await discover_deployment(
                http, base_url="http://127.0.0.1:9/v1", card=None, headers={}
            )

    info = asyncio.run(ask())
    assert isinstance(info, DeploymentInfo)
    assert info.facts == ()
    assert {g.source for g in info.unavailable} == {MODELS_CARD, VLLM_CACHE, LLAMACPP_PROPS}
    assert all(g.reason for g in info.unavailable)


def test_label_and_props_parsing() -> None:
    assert vllm_cache_facts(b"not prometheus {{{")[0] == {}
    assert vllm_cache_facts(b"up 1\n") == ({}, "no vllm:cache_config_info metric")
    found, _ = llamacpp_facts(
        orjson.dumps({"total_slots": 4, "default_generation_settings": {"n_ctx": 4096}})
    )
    assert found == {"scheduler.max_num_seqs": 4, "max_model_len": 4096, "engine": "llama.cpp"}
    assert llamacpp_facts(b"[]") == ({}, "not a JSON object")
