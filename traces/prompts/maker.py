"""Deterministic prompt materialisation: the text (and images) a request sends.

A trace gives token counts and ``prefix_blocks`` ids; ``PromptMaker.make`` turns them into
text whose token count is exact under the chosen strategy, and into image ``data:`` URLs.
Block i of a request covers its tokens [i*block_size, (i+1)*block_size); the text of a
block is a pure function of (seed, block id), and a request whose prompt ends inside a
block sends the *beginning* of that block's text, so equal ids always give byte-identical
prefixes and prefix caches behave as in production. Tokens past the last block id come
from a stream seeded by the request id.

Strategies (``PromptMaker.strategy`` describes the one in use, for run.json):

- ``words`` (default): one token is one word of a fixed vocabulary. The built-in simulator
  counts whitespace words, so counts are exact against it.
- ``calibrated``: ``tokens_per_word`` words-to-tokens ratio measured against a server's
  reported ``usage.prompt_tokens`` (see ``fit_calibration``); N tokens become
  round(N / tokens_per_word) words.
- ``tokenizer``: a local Hugging Face ``tokenizer.json`` (``HFTokenCounter``; the optional
  ``tokenizers`` extra). Text is built from token ids whose words encode to one token,
  then re-encoded and adjusted until each block's count is exact.
- ``tokenize-server``: the same with any ``tokenize(text) -> int`` callable
  (``CallableTokenCounter``), e.g. a server's ``/tokenize``; the I/O stays with the caller.

``template_tokens`` is the chat-template overhead the server adds to a chat request's
prompt (role markers, BOS); it is subtracted from the text of ``api == "chat"`` requests.
Imports nothing of the project but ``traces.records``, ``traces.errors`` and (lazily)
``traces.prompts.images``.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from traces.errors import MissingExtraError, PromptError
from traces.records import TraceRequest

_VOCAB_TEXT: Final = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu amber basil "
    "cedar dune ember fjord grove harbor island jasper kernel lantern meadow nectar orchard "
    "pebble quartz river summit timber umber valley willow yarrow zephyr anchor beacon canyon "
    "delta estuary falcon glacier horizon iris jungle kestrel lagoon mesa nova opal prairie"
)
_VOCAB: Final[tuple[str, ...]] = tuple(_VOCAB_TEXT.split())

STRATEGIES: Final = ("words", "calibrated", "tokenizer", "tokenize-server")
DEFAULT_CACHE_TOKENS: Final = 8_388_608
"""Block texts kept (in tokens, LRU): shared prefixes stay hot, unique blocks age out."""
_MAX_ADJUST: Final = 64


_TABLES: dict[int, tuple[Sequence[str], tuple[str, ...]]] = {}


def _byte_table(pool: Sequence[str]) -> tuple[str, ...]:
    """The word of each byte value for a pool of at most 256 words (memoised by identity)."""
    hit = _TABLES.get(id(pool))
    if hit is not None and hit[0] is pool:
        return hit[1]
    table = tuple(pool[b % len(pool)] for b in range(256))
    if len(_TABLES) > 64:
        _TABLES.clear()
    _TABLES[id(pool)] = (pool, table)
    return table


def _stream(seed: bytes, n: int, pool: Sequence[str], starters: Sequence[str] = ()) -> list[str]:
    """``n`` pseudo-random words of ``pool``, a pure function of ``seed``; the first k words
    for ``n`` are the k words for any larger ``n`` (SHAKE-256 output is prefix-consistent).
    The first word comes from ``starters`` when given (words that are one token even at the
    start of a text)."""
    if n <= 0:
        return []
    size = len(pool)
    if size <= 256:
        out = list(map(_byte_table(pool).__getitem__, hashlib.shake_256(seed).digest(n)))
    else:
        raw = memoryview(hashlib.shake_256(seed).digest(2 * n)).cast("H")
        out = [pool[x % size] for x in raw]
    if starters:
        out[0] = starters[hashlib.shake_256(seed).digest(1)[0] % len(starters)]
    return out


def _words(seed: bytes, n: int) -> list[str]:
    """``n`` words of the built-in vocabulary (the v0 stream, unchanged)."""
    return _stream(seed, n, _VOCAB)


def _head(text: str, k: int) -> str:
    """The first ``k`` space-separated words of ``text``."""
    return " ".join(text.split(" ", k)[:k])


# --------------------------------------------------------------------------- counters
class TokenCounter(Protocol):
    """Counts tokens exactly as the target server will, for the counted strategies."""

    @property
    def strategy(self) -> str:
        """``tokenizer`` or ``tokenize-server``."""
        ...

    @property
    def description(self) -> str:
        """What counts (a file and its digest, a URL), for run.json."""
        ...

    def count(self, text: str) -> int:
        """Tokens of ``text`` without special tokens or chat template."""
        ...

    def words(self) -> WordPool:
        """The vocabulary of synthetic text: words that are one token each."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class WordPool:
    """Words that encode to one token after a space (``words``), and those that also do at
    the start of a text (``starters``, which begin every piece). Whitespace-splitting
    pre-tokenizers (byte-level BPE, Metaspace, WordLevel) then count a text of n such words
    as n tokens, and pieces joined by a space add up."""

    words: tuple[str, ...]
    starters: tuple[str, ...]


def _select_pool(
    candidates: Sequence[str], spaced: Sequence[int], alone: Sequence[int], where: str
) -> WordPool:
    """The ``WordPool`` of ``candidates`` given their token counts after a space and alone."""
    words = tuple(w for w, n in zip(candidates, spaced, strict=True) if n == 1)
    starters = tuple(
        w for w, n, m in zip(candidates, spaced, alone, strict=True) if n == 1 and m == 1
    )
    if not words:
        raise PromptError(f"{where}: no word encodes to a single token")
    return WordPool(words=words, starters=starters)


class HFTokenCounter:
    """A local Hugging Face ``tokenizer.json`` (the ``tokenizers`` extra).

    Its vocabulary is scanned once, in id order, for alphabetic tokens that decode to a
    word which re-encodes (after a space, and alone where possible) to exactly one token.
    """

    def __init__(self, tokenizer: Any, *, description: str = "tokenizers.Tokenizer") -> None:
        self._tok = tokenizer
        self._description = description
        self._pool: WordPool | None = None

    @classmethod
    def from_file(cls, path: Path) -> HFTokenCounter:
        """Load ``tokenizer.json``; raise ``MissingExtraError`` without ``tokenizers``."""

        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise MissingExtraError(
                "the tokenizer strategy needs tokenizers: pip install 'llm-loadgen[tokenizer]'"
            ) from exc
        path = Path(path)
        try:
            data = path.read_bytes()
            tok = Tokenizer.from_str(data.decode("utf-8"))
        except Exception as exc:  # OSError, UnicodeDecodeError, or tokenizers' own Exception
            raise PromptError(f"{path}: not a readable tokenizer.json ({exc})") from exc
        digest = hashlib.sha256(data).hexdigest()[:16]
        return cls(tok, description=f"{path.name} sha256:{digest}")

    @property
    def strategy(self) -> str:
        return "tokenizer"

    @property
    def description(self) -> str:
        return self._description

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def words(self) -> WordPool:
        if self._pool is None:
            size = self._tok.get_vocab_size(with_added_tokens=False)
            seen: dict[str, None] = {}
            for token_id in range(size):
                word = self._tok.decode([token_id]).strip()
                if word.isascii() and word.isalpha() and len(word) <= 16:
                    seen.setdefault(word, None)
            cands = list(seen)
            spaced = self._tok.encode_batch([" " + w for w in cands], add_special_tokens=False)
            alone = self._tok.encode_batch(cands, add_special_tokens=False)
            self._pool = _select_pool(
                cands, [len(e.ids) for e in spaced], [len(e.ids) for e in alone], self._description
            )
        return self._pool


class CallableTokenCounter:
    """Counts with a caller-supplied ``tokenize(text) -> int`` (e.g. a server's /tokenize
    endpoint, called by the replay engine). Pure: all I/O is inside the callable."""

    def __init__(self, tokenize: Callable[[str], int], *, description: str = "tokenize()") -> None:
        self._tokenize = tokenize
        self._description = description
        self._pool: WordPool | None = None

    @property
    def strategy(self) -> str:
        return "tokenize-server"

    @property
    def description(self) -> str:
        return self._description

    def count(self, text: str) -> int:
        return int(self._tokenize(text))

    def words(self) -> WordPool:
        if self._pool is None:
            # "x w" - "x" isolates the cost of " w" from whatever the server adds per call.
            base = self.count("x")
            spaced = [self.count(f"x {w}") - base for w in _VOCAB]
            alone = [self.count(w) for w in _VOCAB]
            self._pool = _select_pool(_VOCAB, spaced, alone, self._description)
        return self._pool


# --------------------------------------------------------------------------- calibration
@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationSample:
    """One probe: ``words`` whitespace words sent, ``prompt_tokens`` the server reported."""

    words: int
    prompt_tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """prompt_tokens ≈ overhead_tokens + tokens_per_word * words."""

    tokens_per_word: float
    overhead_tokens: float


def fit_calibration(samples: Sequence[CalibrationSample]) -> Calibration:
    """Least-squares fit of prompt_tokens = overhead + ratio * words.

    With one distinct word count (or a negative fitted overhead) the line goes through the
    origin: ratio = Σ tokens / Σ words. Raises ``ValueError`` without usable samples.
    """
    usable = [x for x in samples if x.words > 0 and x.prompt_tokens > 0]
    if not usable:
        raise ValueError("calibration needs samples with positive words and prompt_tokens")
    n = len(usable)
    mean_w = sum(x.words for x in usable) / n
    mean_t = sum(x.prompt_tokens for x in usable) / n
    var_w = sum((x.words - mean_w) ** 2 for x in usable)
    if var_w > 0:
        cov = sum((x.words - mean_w) * (x.prompt_tokens - mean_t) for x in usable)
        ratio = cov / var_w
        overhead = mean_t - ratio * mean_w
        if ratio > 0 and overhead >= 0:
            return Calibration(tokens_per_word=ratio, overhead_tokens=overhead)
    ratio = sum(x.prompt_tokens for x in usable) / sum(x.words for x in usable)
    return Calibration(tokens_per_word=ratio, overhead_tokens=0.0)


def tokens_per_word(samples: Sequence[CalibrationSample]) -> float:
    """The words-to-tokens ratio of ``fit_calibration``: pass it to ``PromptMaker``."""
    return fit_calibration(samples).tokens_per_word


# --------------------------------------------------------------------------- the maker
@dataclass(frozen=True, slots=True, kw_only=True)
class PromptStrategy:
    """How prompts are materialised; recorded in run.json by the replay."""

    name: str
    block_size: int
    seed: int
    tokens_per_word: float = 1.0
    template_tokens: int = 0
    tokenizer: str | None = None
    image_format: str = "png"


@dataclass(frozen=True, slots=True, kw_only=True)
class Prompt:
    """What a request sends: plain text (completions, or one chat user message), or literal
    chat messages as JSON from the trace; plus its images as ``data:`` URLs."""

    text: str | None = None
    messages_json: str | None = None
    images: tuple[str, ...] = ()


@dataclass(slots=True, kw_only=True)
class PromptMaker:
    """Builds the prompt for trace requests; caches block texts by id (LRU).

    ``block_size``: tokens one ``prefix_blocks`` id stands for (the trace's metadata).
    ``seed``: text and image seed. ``tokens_per_word``: the calibrated strategy's ratio
    (1.0 = the words strategy). ``counter``: a ``TokenCounter`` for the tokenizer and
    tokenize-server strategies. ``template_tokens``: chat-template overhead subtracted from
    chat prompts. ``image_format``: ``png`` or ``jpeg``; ``with_images`` False skips image
    encoding. ``cache_tokens``: bound of the block cache.
    """

    block_size: int = 512
    seed: int = 0
    tokens_per_word: float = 1.0
    counter: TokenCounter | None = None
    template_tokens: int = 0
    image_format: str = "png"
    with_images: bool = True
    cache_tokens: int = DEFAULT_CACHE_TOKENS
    _blocks: OrderedDict[int, str] = field(default_factory=OrderedDict, init=False, repr=False)
    _cached: int = field(default=0, init=False, repr=False)
    _pool: WordPool | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError("block_size must be at least 1")
        if not self.tokens_per_word > 0 or math.isinf(self.tokens_per_word):
            raise ValueError("tokens_per_word must be a positive number")
        if self.counter is not None and self.tokens_per_word != 1.0:
            raise ValueError("tokens_per_word and a token counter are exclusive")
        if self.template_tokens < 0:
            raise ValueError("template_tokens must be >= 0")
        if self.image_format not in ("png", "jpeg"):
            raise ValueError("image_format must be png or jpeg")
        if self.counter is not None:
            self._pool = self.counter.words()

    @property
    def strategy(self) -> PromptStrategy:
        """The strategy in use: name and parameters."""
        if self.counter is not None:
            name, tokenizer = self.counter.strategy, self.counter.description
        else:
            name = "words" if self.tokens_per_word == 1.0 else "calibrated"
            tokenizer = None
        return PromptStrategy(
            name=name,
            block_size=self.block_size,
            seed=self.seed,
            tokens_per_word=self.tokens_per_word,
            template_tokens=self.template_tokens,
            tokenizer=tokenizer,
            image_format=self.image_format,
        )

    # -- pieces of text with an exact token count
    def _n_words(self, tokens: int) -> int:
        return max(1, round(tokens / self.tokens_per_word)) if tokens > 0 else 0

    def _counted(self, seed: bytes, tokens: int) -> str:
        """Text of exactly ``tokens`` tokens under the counter: draw words, count, adjust."""
        assert self.counter is not None
        assert self._pool is not None
        pool = self._pool
        n = tokens
        for _ in range(_MAX_ADJUST):
            text = " ".join(_stream(seed, n, pool.words, pool.starters))
            got = self.counter.count(text)
            if got == tokens:
                return text
            n = max(1, n + tokens - got)
        raise PromptError(f"cannot reach exactly {tokens} tokens with {self.counter.description}")

    def _piece(self, seed: bytes, tokens: int) -> str:
        if self.counter is not None:
            return self._counted(seed, tokens)
        return " ".join(_words(seed, self._n_words(tokens)))

    def _block(self, block_id: int) -> str:
        text = self._blocks.get(block_id)
        if text is not None:
            self._blocks.move_to_end(block_id)
            return text
        text = self._piece(b"block:%d:%d" % (self.seed, block_id), self.block_size)
        self._blocks[block_id] = text
        self._cached += self.block_size
        while self._cached > self.cache_tokens and len(self._blocks) > 1:
            self._blocks.popitem(last=False)
            self._cached -= self.block_size
        return text

    def _partial(self, block_id: int, tokens: int) -> str:
        """The beginning of block ``block_id``'s text, ``tokens`` tokens long."""
        full = self._block(block_id)
        if self.counter is None:
            return _head(full, self._n_words(tokens))
        # Pool words are one token each, so the first `tokens` words usually are exact.
        text = _head(full, tokens)
        if self.counter.count(text) == tokens:
            return text
        return self._counted(b"block:%d:%d" % (self.seed, block_id), tokens)

    def text_tokens(self, req: TraceRequest) -> int:
        """Tokens the text of ``req`` carries: its prompt less the chat-template overhead."""
        overhead = self.template_tokens if req.api == "chat" else 0
        return max(1, req.input_tokens - overhead)

    def text(self, req: TraceRequest) -> str:
        """The synthetic prompt text of ``req`` (ignores its literal prompt/messages)."""
        target = self.text_tokens(req)
        parts: list[str] = []
        used = 0
        for block_id in req.prefix_blocks or ():
            if used >= target:
                break
            take = min(self.block_size, target - used)
            parts.append(
                self._block(block_id) if take == self.block_size else self._partial(block_id, take)
            )
            used += take
        if used < target:
            seed = b"req:%d:%s" % (self.seed, req.request_id.encode())
            parts.append(self._piece(seed, target - used))
        return " ".join(parts)

    def image_urls(self, req: TraceRequest) -> tuple[str, ...]:
        """``data:`` URLs of ``req``'s images, seeded by (seed, request id, position)."""
        if not req.images:
            return ()
        from traces.prompts.images import image_data_url

        fmt = "jpeg" if self.image_format == "jpeg" else "png"
        urls: list[str] = []
        for i, spec in enumerate(req.images):
            key = b"img:%d:%s:%d" % (self.seed, req.request_id.encode(), i)
            seed = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
            urls.append(image_data_url(spec.width, spec.height, seed=seed, fmt=fmt))
        return tuple(urls)

    def make(self, req: TraceRequest) -> Prompt:
        """The prompt for one request: its literal content when the trace has it, otherwise
        synthetic text of exactly its token count; its images when it has any."""
        images = self.image_urls(req) if self.with_images else ()
        if req.messages is not None:
            return Prompt(messages_json=req.messages, images=images)
        if req.prompt is not None:
            return Prompt(text=req.prompt, images=images)
        return Prompt(text=self.text(req), images=images)
