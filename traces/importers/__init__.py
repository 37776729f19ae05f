"""Importers of public trace formats into the workload table (one module per format, and
``registry``, which names them).

Part of ``traces``: pyarrow and the standard library only, nothing else of ours.
"""

__all__ = [
    "aiperf",
    "azure_llm",
    "azure_lmm",
    "base",
    "burstgpt",
    "dataset",
    "errors",
    "mooncake",
    "parse",
    "registry",
    "servegen",
    "sharegpt",
    "sink",
    "splitwise",
]
