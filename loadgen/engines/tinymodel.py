"""A tiny random-weight Llama in Hugging Face layout (``config.json``, safetensors,
``tokenizer.json``) for a real engine on the CPU, built here with no download.

The model does real prefill and decode but knows nothing: its weights are seeded random
numbers, so it writes gibberish made of code-like subwords. Two properties make it a good
load-test peer:

- **Exact token counts offline.** The tokenizer is a GPT-2-style byte-level BPE trained here
  on the local Python standard library and written as ``tokenizer.json``: the client
  counts a prompt's tokens exactly as the server will (``loadgen replay --tokenizer``).
- **Fixed output length, one token per chunk.** Hidden channel 0 is a constant "bias
  channel": every embedding holds ``sqrt(dim)`` there, the layer norms ignore it and no
  layer writes to it. The LM head reads it to put a large negative logit on every token
  that must never be generated: the special tokens (EOS never ends a stream early, so
  ``completion_tokens == max_tokens``), byte tokens that are not valid UTF-8 alone, and
  tokens with whitespace or ``<`` that a server might hold back. Every generated token is
  then one printable content delta.

The tokenizer, the token filter, the cache key and the locked build are shared with the
test suite's GGUF builder for llama.cpp (tests/realserver/tiny_model.py). Weights are
written with ``safetensors.numpy`` (no torch import): a build takes a few seconds, most of
it the tokenizer. Needs ``numpy``, ``safetensors`` and ``tokenizers`` (the ``vllm`` extra
brings them), imported inside the functions that use them; nothing of the replay client.
"""

from __future__ import annotations

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
WEIGHTS_FILE = "model.safetensors"
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
BANNED_LOGIT = -100.0
"""Weight of the bias channel for banned tokens: their logit is about -100 * sqrt(dim)/rms."""
_CORPUS_LIMIT_BYTES = 3_000_000
"""Enough text for a sensible 8k vocabulary; more only slows training."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HFSpec:
    """Shape of the model; the defaults give about 5.8M parameters (f32, 23 MB)."""

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
        return spec_key(BUILDER_VERSION, asdict(self))

    def params(self) -> int:
        """Parameters: embeddings, LM head and the layers' weight matrices (norms left out)."""
        head_dim = self.dim // self.heads
        attention = 2 * self.dim * self.dim + 2 * self.dim * self.kv_heads * head_dim
        return 2 * self.vocab * self.dim + self.layers * (attention + 3 * self.dim * self.ffn)


@dataclass(frozen=True, slots=True, kw_only=True)
class HFModel:
    """The files of one built model: ``directory`` is what vLLM's ``--model`` takes."""

    directory: Path
    tokenizer_json: Path
    spec: HFSpec


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


def train_tokenizer(vocab: int) -> Any:
    """A byte-level BPE of ``vocab`` tokens (special tokens first) on the corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    return tokenizer


def byte_decoder() -> dict[str, int]:
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


def allowed(token: str, decoder: dict[str, int]) -> bool:
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


def tokenizer_config(context: int) -> dict[str, Any]:
    """``tokenizer_config.json``: ChatML, no BOS added, the context as the model's limit."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": ENDOFTEXT,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "add_bos_token": False,
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": context,
    }


def _config(spec: HFSpec, special: dict[str, int]) -> dict[str, Any]:
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
        "bos_token_id": special[ENDOFTEXT],
        "eos_token_id": special[IM_END],
        "pad_token_id": special[ENDOFTEXT],
    }


def write_weights(path: Path, vocab: dict[str, int], spec: HFSpec) -> None:
    """Seeded random weights with the bias channel, in Hugging Face's Llama names."""
    import numpy as np
    from safetensors.numpy import save_file

    tokens = [""] * len(vocab)
    for text, index in vocab.items():
        tokens[index] = text
    decoder = byte_decoder()
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
    head[:, 0] = [0.0 if allowed(t, decoder) else BANNED_LOGIT for t in tokens]
    tensors["lm_head.weight"] = head
    save_file(tensors, str(path), metadata={"format": "pt"})


def build(out: Path, spec: HFSpec | None = None) -> HFModel:
    """Train the tokenizer and write the model files into ``out`` (created)."""
    spec = spec or HFSpec()
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(spec.vocab)
    tokenizer.save(str(out / TOKENIZER_FILE))
    vocab: dict[str, int] = json.loads(tokenizer.to_str())["model"]["vocab"]
    special = {t: vocab[t] for t in SPECIAL_TOKENS}
    config = tokenizer_config(spec.context)
    (out / TOKENIZER_CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    (out / "config.json").write_text(json.dumps(_config(spec, special), indent=2) + "\n")
    generation = {"bos_token_id": special[ENDOFTEXT], "eos_token_id": special[IM_END]}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    write_weights(out / WEIGHTS_FILE, vocab, spec)
    (out / SPEC_FILE).write_text(json.dumps(asdict(spec), indent=2) + "\n")
    return HFModel(directory=out, tokenizer_json=out / TOKENIZER_FILE, spec=spec)


def ensure_model(cache_root: Path, spec: HFSpec | None = None) -> HFModel:
    """The model built once into ``cache_root/tiny-llama-hf-<key>`` (see ``build_once``)."""
    spec = spec or HFSpec()
    final = cache_root / f"tiny-llama-hf-{spec.key()}"
    model = HFModel(directory=final, tokenizer_json=final / TOKENIZER_FILE, spec=spec)
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
    see a half-written model."""
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


def default_cache_root(environ: dict[str, str]) -> Path:
    """Where built models are kept: ``$LOADGEN_CACHE_DIR``, else ``$XDG_CACHE_HOME`` or
    ``~/.cache``, under ``llm-loadgen`` (the caller passes the environment)."""
    if environ.get("LOADGEN_CACHE_DIR"):
        return Path(environ["LOADGEN_CACHE_DIR"])
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-loadgen"


CPU_NAME = "cpu-core"
"""The catalog name of one CPU core as a budget's "GPU" (:func:`catalog_toml`)."""


def catalog_toml(spec: HFSpec, name: str = "tiny-llama") -> str:
    """A user catalog (``--catalog FILE`` of ``plan``, ``sim``, ``decompose``) naming the
    tiny model of ``spec`` as ``name`` and one CPU core as :data:`CPU_NAME`. The core's
    peaks are nominal ceilings, not measurements: a calibration (``loadgen plan calibrate
    RUN``, ``decompose --calibrate``) fits the share of them that the engine achieves."""
    # The weights and KV cache are f32, counted here as the catalog's bf16: the calibrated
    # memory share absorbs the factor.
    return f"""# The tiny random-weight model of loadgen.engines.tinymodel, and one CPU core.
[models."{name}"]
source = "loadgen.engines.tinymodel HFSpec (built locally, f32 counted as bf16)"
params_total = {spec.params()}
params_active = {spec.params()}
layers = {spec.layers}
hidden = {spec.dim}
q_heads = {spec.heads}
kv_heads = {spec.kv_heads}
head_dim = {spec.dim // spec.heads}
ffn_hidden = {spec.ffn}
vocab = {spec.vocab}
max_context = {spec.context}

[gpus.{CPU_NAME}]
source = "one CPU core, nominal ceilings: a calibration fits the achieved share"
peak_flops_bf16 = 1e12
hbm_bytes = 16e9
hbm_bandwidth_bytes_per_s = 20e9
"""
