"""The one compiled module, beside the PEP 621 metadata in pyproject.toml.

``loadgen._sse_scan`` is optional: where it cannot be built (no C compiler), the install
goes on and ``loadgen.sse_bulk`` uses its pure-Python path, which gives the same results.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "loadgen._sse_scan",
            ["loadgen/_sse_scan.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
