"""The engine simulator's tokenizer: what a prompt's tokens are, for counting and caching.

:class:`WordTokenizer` (the default) makes one token of each whitespace-separated word, the
same rule as :mod:`loadgen.sim.tokens` and the replay's ``words`` prompt strategy, so counts
are exact against the harness. :class:`FileTokenizer` loads a local Hugging Face
``tokenizer.json`` (the optional ``tokenizers`` package), for traces whose prompts were built
with the ``tokenizer`` strategy. Both return hashable tokens for the prefix cache.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from loadgen.errors import ConfigError


class Tokenizer(Protocol):
    """Splits prompt text into tokens (without special tokens or chat template)."""

    @property
    def name(self) -> str:
        """What tokenizes, for /v1/models metadata."""

    def tokenize(self, text: str) -> Sequence[str] | Sequence[int]:
        """The tokens of ``text``."""


class WordTokenizer:
    """One token per whitespace-separated word."""

    name = "words"

    def tokenize(self, text: str) -> list[str]:
        return text.split()


class FileTokenizer:
    """A Hugging Face ``tokenizer.json`` on local disk (needs the ``tokenizers`` package)."""

    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer as HFTokenizer  # optional extra
        except ImportError as exc:
            raise ConfigError(
                "--tokenizer needs the 'tokenizers' package (pip install 'llm-loadgen[tokenizer]')"
            ) from exc
        try:
            self._tok: Any = HFTokenizer.from_file(str(path))
        except Exception as exc:  # the library raises its own untyped exceptions
            raise ConfigError(f"cannot load tokenizer {path}: {exc}") from exc
        self.name = f"file:{path.name}"

    def tokenize(self, text: str) -> list[int]:
        ids: list[int] = self._tok.encode(text, add_special_tokens=False).ids
        return ids


def make_tokenizer(path: Path | None) -> Tokenizer:
    """The tokenizer in ``path``, or the word tokenizer when None."""
    return WordTokenizer() if path is None else FileTokenizer(path)
