"""Deterministic prompt materialisation: the text a request sends for its token counts.

Strategy v0 ("words"): one token is one word drawn from a fixed vocabulary, so a prompt of
N tokens is N words. The built-in simulator counts words, so the count is exact there; real
tokenizers need calibration (see docs/formats.md). Equal prefix block ids give byte-identical
text, so prefix caches behave as they would in production.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from traces.records import TraceRequest

_VOCAB: tuple[str, ...] = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu amber basil "
    "cedar dune ember fjord grove harbor island jasper kernel lantern meadow nectar orchard "
    "pebble quartz river summit timber umber valley willow yarrow zephyr anchor beacon canyon "
    "delta estuary falcon glacier horizon iris jungle kestrel lagoon mesa nova opal prairie"
).split()


def _words(seed: bytes, n: int) -> list[str]:
    """``n`` pseudo-random vocabulary words, a pure function of ``seed``."""
    out: list[str] = []
    counter = 0
    vocab = _VOCAB
    size = len(vocab)
    while len(out) < n:
        digest = hashlib.blake2b(seed + counter.to_bytes(8, "little"), digest_size=64).digest()
        out.extend(vocab[b % size] for b in digest)
        counter += 1
    del out[n:]
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Prompt:
    """What a request sends: plain text (completions, or one chat user message), or literal
    chat messages as JSON from the trace."""

    text: str | None = None
    messages_json: str | None = None


@dataclass(slots=True, kw_only=True)
class PromptMaker:
    """Builds the prompt text for trace requests; caches prefix blocks by id.

    ``block_size`` is the number of tokens one ``prefix_blocks`` id stands for.
    """

    block_size: int = 512
    seed: int = 0
    _blocks: dict[int, str] = field(default_factory=dict)

    def _block(self, block_id: int) -> str:
        text = self._blocks.get(block_id)
        if text is None:
            text = " ".join(_words(b"block:%d:%d" % (self.seed, block_id), self.block_size))
            self._blocks[block_id] = text
        return text

    def make(self, req: TraceRequest) -> Prompt:
        """The prompt for one request: its literal content when the trace has it, otherwise
        ``input_tokens`` words, starting with the text of its prefix blocks."""
        if req.messages is not None:
            return Prompt(messages_json=req.messages)
        if req.prompt is not None:
            return Prompt(text=req.prompt)
        parts: list[str] = []
        used = 0
        for block_id in req.prefix_blocks or ():
            if used + self.block_size > req.input_tokens:
                break
            parts.append(self._block(block_id))
            used += self.block_size
        rest = req.input_tokens - used
        if rest > 0:
            parts.append(" ".join(_words(b"req:%d:%s" % (self.seed, req.request_id.encode()), rest)))
        return Prompt(text=" ".join(parts))
