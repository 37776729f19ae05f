"""The compiled modules, beside the PEP 621 metadata in pyproject.toml.

Both are optional: where they cannot be built (no C compiler), the install goes on and the
pure-Python path is used, which gives the same results more slowly. ``loadgen.stream._sse_scan``
frames and classifies SSE events (else the reference does: ``SSEDecoder`` and
``StreamState.add`` per event); ``loadgen.http._chunked`` decodes chunked response bodies
(else httptools decodes them, as it parses every head).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "loadgen.stream._sse_scan",
            ["loadgen/stream/_sse_scan.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "loadgen.http._chunked",
            ["loadgen/http/_chunked.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
