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

The tokenizer, the token filter, the cache key and the locked build are the product's
(:mod:`loadgen.engines.tinymodel`, which builds the same kind of model in Hugging Face layout
for vLLM); this module adds the GGUF. Usage as a script: ``python tiny_model.py --out DIR``
(or ``--cache DIR`` to build once into a versioned sub-directory). Imported by the
real-server fixture through its file path. Needs ``numpy``, ``gguf`` and ``tokenizers`` (the
``realserver`` extra).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loadgen.engines.tinymodel import (
    BANNED_LOGIT,
    CHAT_TEMPLATE,
    ENDOFTEXT,
    IM_END,
    SPEC_FILE,
    SPECIAL_TOKENS,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    allowed,
    build_once,
    byte_decoder,
    render_chatml,
    spec_key,
    tokenizer_config,
    train_tokenizer,
)

__all__ = ["ModelSpec", "TinyModel", "build", "ensure_model", "render_chatml"]

BUILDER_VERSION = "1"
"""Bump when the output changes: the cache directory is keyed by it."""
MODEL_FILE = "tiny-llama.gguf"


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
    decoder = byte_decoder()
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
    head[:, 0] = [0.0 if allowed(t, decoder) else BANNED_LOGIT for t in tokens]
    writer.add_tensor("output.weight", head)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def build(out: Path, spec: ModelSpec | None = None) -> TinyModel:
    """Train the tokenizer and write the model files into ``out`` (created)."""
    spec = spec or ModelSpec()
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(spec.vocab)
    tokenizer.save(str(out / TOKENIZER_FILE))
    config = tokenizer_config(spec.context)
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
