"""The private HTTP/1.1 stack of the replay client: pool, connection, exchange, headers,
deadlines, stamping.

Response bytes are stamped on arrival (``stamping``); the C chunked decoder
(``_chunked``) is optional. Imports httpx and httptools and nothing else of ours: no
``traces``, no Polars, no analyzers, no simulator.
"""

__all__ = [
    "connection",
    "deadline",
    "exchange",
    "headers",
    "pool",
    "stamping",
]
