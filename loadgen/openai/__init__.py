"""The OpenAI-compatible wire protocol: request bodies, chunk classification, server timings.

Sans-IO and pure: imports ``traces`` and orjson only; no httpx, no other ``loadgen`` module.
"""

__all__ = [
    "bodies",
    "chunks",
    "embeddings",
    "events",
    "refusals",
    "timings",
]
