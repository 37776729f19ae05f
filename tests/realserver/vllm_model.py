"""Build a tiny random-weight Llama in Hugging Face layout (``config.json``, safetensors,
``tokenizer.json``) for a real vLLM server on the CPU.

The same recipe as ``tiny_model.py`` (the GGUF for llama.cpp), whose tokenizer training and
token filter it reuses: a byte-level BPE trained here on the local Python standard library
(so a test counts a prompt's tokens exactly as the server does), seeded random weights, and a
constant "bias channel" (hidden dimension 0) that the LM head reads to push every special
token and every token that is not one printable delta far down. EOS is never sampled, so
``completion_tokens == max_tokens``, and every generated token is one content delta.

The weights are written with ``safetensors.numpy`` (no torch import: the build takes a few
seconds, most of it the tokenizer). Usage as a script: ``python vllm_model.py --out DIR``.
Imported by the real-server fixture through its file path. Needs ``numpy``, ``safetensors``
and ``tokenizers`` (all pulled in by the ``vllm`` extra); nothing of the project.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

BUILDER_VERSION = "1"
"""Bump when the output changes: the cache directory is keyed by it."""
WEIGHTS_FILE = "model.safetensors"
SPEC_FILE = "spec.json"
_BANNED_LOGIT = -100.0


def _gguf_builder() -> ModuleType:
    """``tiny_model.py`` beside this file (its tokenizer and token filter)."""
    key = "_realserver_tiny_model"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, Path(__file__).with_name("tiny_model.py"))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True, slots=True, kw_only=True)
class HFSpec:
    """Shape of the model; the defaults give about 5M parameters (f32, 20 MB)."""

    dim: int = 256
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 768
    vocab: int = 8192
    context: int = 2048
    seed: int = 1234

    def key(self) -> str:
        """Cache key: the builder version, the shape, and the corpus (this Python's stdlib)."""
        key: str = _gguf_builder().spec_key(BUILDER_VERSION, asdict(self))
        return key


@dataclass(frozen=True, slots=True, kw_only=True)
class HFModel:
    """The files of one built model: ``directory`` is what ``--model`` takes."""

    directory: Path
    tokenizer_json: Path
    spec: HFSpec


def _config(spec: HFSpec, special: dict[str, int]) -> dict[str, Any]:
    tiny = _gguf_builder()
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.dim,
        "intermediate_size": spec.ffn,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.dim // spec.heads,
        "hidden_act": "silu",
        "max_position_embeddings": spec.context,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": spec.vocab,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": special[tiny.ENDOFTEXT],
        "eos_token_id": special[tiny.IM_END],
        "pad_token_id": special[tiny.ENDOFTEXT],
    }


def write_weights(path: Path, vocab: dict[str, int], spec: HFSpec) -> None:
    """Seeded random weights with the bias channel, in Hugging Face's Llama names."""
    import numpy as np
    from safetensors.numpy import save_file

    tiny = _gguf_builder()
    tokens = [""] * len(vocab)
    for text, index in vocab.items():
        tokens[index] = text
    decoder = tiny._byte_decoder()
    rng = np.random.default_rng(spec.seed)
    dim, ffn, head_dim = spec.dim, spec.ffn, spec.dim // spec.heads
    kv_dim = spec.kv_heads * head_dim

    def normal(rows: int, cols: int, scale: float) -> Any:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * scale).astype(np.float32)

    tensors: dict[str, Any] = {}
    embed = normal(len(tokens), dim, 1.0)
    embed[:, 0] = math.sqrt(dim)  # the bias channel
    tensors["model.embed_tokens.weight"] = embed
    norm = np.ones(dim, dtype=np.float32)
    norm[0] = 0.0  # the layers never see the bias channel
    for layer in range(spec.layers):
        p = f"model.layers.{layer}."
        o_proj = normal(dim, dim, 0.5 / math.sqrt(dim))
        down = normal(dim, ffn, 0.5 / math.sqrt(ffn))
        o_proj[0, :] = 0.0  # ... nor write to it
        down[0, :] = 0.0
        tensors[p + "input_layernorm.weight"] = norm.copy()
        tensors[p + "post_attention_layernorm.weight"] = norm.copy()
        tensors[p + "self_attn.q_proj.weight"] = normal(dim, dim, 1 / math.sqrt(dim))
        tensors[p + "self_attn.k_proj.weight"] = normal(kv_dim, dim, 1 / math.sqrt(dim))
        tensors[p + "self_attn.v_proj.weight"] = normal(kv_dim, dim, 1 / math.sqrt(dim))
        tensors[p + "self_attn.o_proj.weight"] = o_proj
        tensors[p + "mlp.gate_proj.weight"] = normal(ffn, dim, 1 / math.sqrt(dim))
        tensors[p + "mlp.up_proj.weight"] = normal(ffn, dim, 1 / math.sqrt(dim))
        tensors[p + "mlp.down_proj.weight"] = down
    tensors["model.norm.weight"] = np.ones(dim, dtype=np.float32)
    head = normal(len(tokens), dim, 2.0 / math.sqrt(dim))
    head[:, 0] = [0.0 if tiny._allowed(t, decoder) else _BANNED_LOGIT for t in tokens]
    tensors["lm_head.weight"] = head
    save_file(tensors, str(path), metadata={"format": "pt"})


def build(out: Path, spec: HFSpec | None = None) -> HFModel:
    """Train the tokenizer and write the model files into ``out`` (created)."""
    spec = spec or HFSpec()
    tiny = _gguf_builder()
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = tiny.train_tokenizer(tiny.ModelSpec(vocab=spec.vocab, context=spec.context))
    tokenizer.save(str(out / tiny.TOKENIZER_FILE))
    vocab: dict[str, int] = json.loads(tokenizer.to_str())["model"]["vocab"]
    special = {t: vocab[t] for t in tiny.SPECIAL_TOKENS}
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tiny.ENDOFTEXT,
        "eos_token": tiny.IM_END,
        "pad_token": tiny.ENDOFTEXT,
        "add_bos_token": False,
        "chat_template": tiny.CHAT_TEMPLATE,
        "model_max_length": spec.context,
    }
    (out / tiny.TOKENIZER_CONFIG_FILE).write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    (out / "config.json").write_text(json.dumps(_config(spec, special), indent=2) + "\n")
    generation = {"bos_token_id": special[tiny.ENDOFTEXT], "eos_token_id": special[tiny.IM_END]}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    write_weights(out / WEIGHTS_FILE, vocab, spec)
    (out / SPEC_FILE).write_text(json.dumps(asdict(spec), indent=2) + "\n")
    return HFModel(directory=out, tokenizer_json=out / tiny.TOKENIZER_FILE, spec=spec)


def ensure_model(cache_root: Path, spec: HFSpec | None = None) -> HFModel:
    """The model built once into ``cache_root/<key>`` (locked, then renamed into place, so
    concurrent callers neither race nor see a half-written model)."""
    spec = spec or HFSpec()
    final = cache_root / f"tiny-llama-hf-{spec.key()}"
    model = HFModel(
        directory=final, tokenizer_json=final / _gguf_builder().TOKENIZER_FILE, spec=spec
    )
    _gguf_builder().build_once(cache_root, final, lambda staging: build(staging, spec))
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="write the files into this directory")
    where.add_argument("--cache", type=Path, help="build once into a versioned sub-directory")
    args = parser.parse_args(argv)
    model = build(args.out) if args.out else ensure_model(args.cache)
    print(model.directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
