"""Rendering of what the analyzers return: console tables, Markdown, gate output, HTML and
charts. No metric maths.

Imports ``analyzers`` and ``traces``; never ``loadgen``, httpx or click. rich renders the
console; matplotlib (the ``report`` extra) only inside ``charts``' functions.
"""

__all__ = [
    "cache",
    "charts",
    "compare",
    "console",
    "fmt",
    "gate",
    "glossary",
    "html",
    "jsondoc",
    "markdown",
    "plan",
    "tables",
    "theme",
]
