"""Build a tiny random-weight llama model (GGUF) and its tokenizer, for a real llama.cpp server.

The model does real prefill and decode on the CPU but knows nothing: its weights are random
(seeded), so its output is gibberish made of code-like subwords. Two properties make it a
good load-test peer:

- **Exact token counts offline.** The tokenizer is a GPT-2-style byte-level BPE trained here
  on the local Python standard library; the GGUF carries the same vocabulary and merges
  (``tokenizer.ggml.model = gpt2``, ``pre = gpt-2``) and ``tokenizer.json`` is written next
  to it, so a test can count a prompt's tokens exactly as the server will.
- **Fixed output length, one token per chunk.** Hidden channel 0 is a constant "bias
  channel": every embedding holds ``sqrt(dim)`` there, the layer norms ignore it and no layer
  writes to it. The LM head reads it to put a large negative logit on every token that must
  never be generated: the special tokens (so EOS never ends a stream early and
  ``completion_tokens == max_tokens``), byte tokens that are not valid UTF-8 alone, and
  tokens with whitespace or ``<`` that a server might hold back (partial stop strings,
  trimming). Every generated token is then one printable content delta.

Usage as a script: ``python tiny_model.py --out DIR`` (or ``--cache DIR`` to build once into
a versioned sub-directory). Imported by the real-server fixture through its file path.
Needs ``numpy``, ``gguf`` and ``tokenizers`` (the ``realserver`` extra); nothing of the
project.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import math
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BUILDER_VERSION = "1"
"""Bump when the output changes: the cache directory is keyed by it."""
MODEL_FILE = "tiny-llama.gguf"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPEC_FILE = "spec.json"
ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""ChatML; ``render_chatml`` is the same in Python, for counting a chat prompt's tokens."""
_BANNED_LOGIT = -100.0
"""Weight of the bias channel for banned tokens: their logit is about -100 * sqrt(dim)/rms."""
_CORPUS_LIMIT_BYTES = 3_000_000
"""Enough text for a sensible 8k vocabulary; more only slows training."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """Shape of the tiny model; the defaults give 7.6M parameters (f32, 31 MB)."""

    dim: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 4
    ffn: int = 768
    vocab: int = 8192
    context: int = 8192
    seed: int = 1234

    def key(self) -> str:
        """Cache key: the builder version, the shape, and the corpus (this Python's stdlib)."""
        return spec_key(BUILDER_VERSION, asdict(self))


@dataclass(frozen=True, slots=True, kw_only=True)
class TinyModel:
    """The files of one built model."""

    directory: Path
    gguf: Path
    tokenizer_json: Path
    spec: ModelSpec


def render_chatml(messages: list[dict[str, str]]) -> str:
    """The prompt text the server renders for ``messages`` (with the generation prompt)."""
    parts = [f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages]
    return "".join(parts) + f"{IM_START}assistant\n"


def _corpus() -> Iterator[str]:
    """Text to train on: the standard library's top-level modules, in name order."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    total = 0
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        total += len(text)
        yield text
        if total >= _CORPUS_LIMIT_BYTES:
            return


def train_tokenizer(spec: ModelSpec) -> Any:
    """A byte-level BPE of ``spec.vocab`` tokens (special tokens first) on the corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    return tokenizer


def _byte_decoder() -> dict[str, int]:
    """GPT-2's map from the printable stand-in characters back to byte values."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def _allowed(token: str, decoder: dict[str, int]) -> bool:
    """Whether the model may generate ``token``: one printable, complete UTF-8 delta with no
    whitespace except one leading space, and no ``<`` (which could start a stop string)."""
    if token in SPECIAL_TOKENS:
        return False
    try:
        text = bytes(decoder[c] for c in token).decode("utf-8")
    except (KeyError, UnicodeDecodeError):
        return False
    body = text.removeprefix(" ")
    return (
        bool(body)
        and body.isprintable()
        and not any(c.isspace() for c in body)
        and ("<" not in body)
    )


def write_gguf(path: Path, tokenizer: Any, spec: ModelSpec) -> None:
    """Write the llama-architecture GGUF: metadata, the tokenizer and seeded random weights."""
    import gguf
    import numpy as np

    state = json.loads(tokenizer.to_str())
    vocab: dict[str, int] = state["model"]["vocab"]
    tokens = [""] * len(vocab)
    for text, index in vocab.items():
        tokens[index] = text
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["model"]["merges"]]
    special = {t: vocab[t] for t in SPECIAL_TOKENS}
    decoder = _byte_decoder()
    n_vocab = len(tokens)

    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("tiny-llama")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(spec.context)
    writer.add_embedding_length(spec.dim)
    writer.add_block_count(spec.layers)
    writer.add_feed_forward_length(spec.ffn)
    writer.add_head_count(spec.heads)
    writer.add_head_count_kv(spec.kv_heads)
    writer.add_rope_dimension_count(spec.dim // spec.heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens]
    )
    writer.add_token_merges(merges)
    writer.add_bos_token_id(special[ENDOFTEXT])
    writer.add_eos_token_id(special[IM_END])
    writer.add_eot_token_id(special[IM_END])
    writer.add_pad_token_id(special[ENDOFTEXT])
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    rng = np.random.default_rng(spec.seed)
    dim, ffn, head_dim = spec.dim, spec.ffn, spec.dim // spec.heads
    kv_dim = spec.kv_heads * head_dim

    def normal(rows: int, cols: int, scale: float) -> Any:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * scale).astype(np.float32)

    # numpy shapes are (out, in): gguf reverses them into ggml's (ne0 = in, ne1 = out).
    embed = normal(n_vocab, dim, 1.0)
    embed[:, 0] = math.sqrt(dim)  # the bias channel
    writer.add_tensor("token_embd.weight", embed)
    norm_weight = np.ones(dim, dtype=np.float32)
    norm_weight[0] = 0.0  # the layers never see the bias channel
    for layer in range(spec.layers):
        prefix = f"blk.{layer}."
        attn_out = normal(dim, dim, 0.5 / math.sqrt(dim))
        ffn_down = normal(dim, ffn, 0.5 / math.sqrt(ffn))
        attn_out[0, :] = 0.0  # ... nor write to it
        ffn_down[0, :] = 0.0
        writer.add_tensor(prefix + "attn_norm.weight", norm_weight)
        writer.add_tensor(prefix + "attn_q.weight", normal(dim, dim, 1 / math.sqrt(dim)))
        writer.add_tensor(prefix + "attn_k.weight", normal(kv_dim, dim, 1 / math.sqrt(dim)))
        writer.add_tensor(prefix + "attn_v.weight", normal(kv_dim, dim, 1 / math.sqrt(dim)))
        writer.add_tensor(prefix + "attn_output.weight", attn_out)
        writer.add_tensor(prefix + "ffn_norm.weight", norm_weight)
        writer.add_tensor(prefix + "ffn_gate.weight", normal(ffn, dim, 1 / math.sqrt(dim)))
        writer.add_tensor(prefix + "ffn_up.weight", normal(ffn, dim, 1 / math.sqrt(dim)))
        writer.add_tensor(prefix + "ffn_down.weight", ffn_down)
    writer.add_tensor("output_norm.weight", np.ones(dim, dtype=np.float32))
    head = normal(n_vocab, dim, 2.0 / math.sqrt(dim))
    head[:, 0] = [0.0 if _allowed(t, decoder) else _BANNED_LOGIT for t in tokens]
    writer.add_tensor("output.weight", head)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def build(out: Path, spec: ModelSpec | None = None) -> TinyModel:
    """Train the tokenizer and write the model files into ``out`` (created)."""
    spec = spec or ModelSpec()
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(spec)
    tokenizer.save(str(out / TOKENIZER_FILE))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": ENDOFTEXT,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "add_bos_token": False,
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": spec.context,
    }
    (out / TOKENIZER_CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    write_gguf(out / MODEL_FILE, tokenizer, spec)
    (out / SPEC_FILE).write_text(json.dumps(asdict(spec), indent=2) + "\n")
    return TinyModel(
        directory=out, gguf=out / MODEL_FILE, tokenizer_json=out / TOKENIZER_FILE, spec=spec
    )


def ensure_model(cache_root: Path, spec: ModelSpec | None = None) -> TinyModel:
    """The model built once into ``cache_root/<key>`` (locked, then renamed into place, so
    concurrent callers neither race nor see a half-written model)."""
    spec = spec or ModelSpec()
    final = cache_root / f"tiny-llama-{spec.key()}"
    model = TinyModel(
        directory=final,
        gguf=final / MODEL_FILE,
        tokenizer_json=final / TOKENIZER_FILE,
        spec=spec,
    )
    build_once(cache_root, final, lambda staging: build(staging, spec))
    return model


def spec_key(builder_version: str, shape: dict[str, Any]) -> str:
    """12 hex digits of a builder's version, a model's shape and the tokenizer's corpus
    (this Python's stdlib): the cache directory's name."""
    text = json.dumps(
        {"builder": builder_version, "python": sys.version.split()[0], **shape}, sort_keys=True
    )
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def build_once(cache_root: Path, final: Path, build_into: Callable[[Path], object]) -> None:
    """Build into ``final`` unless its ``SPEC_FILE`` is there: under ``cache_root/.lock``,
    into a staging directory renamed into place, so concurrent callers neither race nor
    see a half-written model. Shared with ``vllm_model.py``."""
    if (final / SPEC_FILE).exists():
        return
    cache_root.mkdir(parents=True, exist_ok=True)
    with open(cache_root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / SPEC_FILE).exists():
            return
        staging = Path(tempfile.mkdtemp(prefix=".build-", dir=cache_root))
        try:
            build_into(staging)
            os.replace(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="write the files into this directory")
    where.add_argument("--cache", type=Path, help="build once into a versioned sub-directory")
    parser.add_argument("--seed", type=int, default=ModelSpec().seed)
    args = parser.parse_args(argv)
    spec = ModelSpec(seed=args.seed)
    model = build(args.out, spec) if args.out else ensure_model(args.cache, spec)
    print(model.gguf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
