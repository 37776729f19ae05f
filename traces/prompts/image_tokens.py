"""How many language-model tokens an image becomes, per vision-language model family.

The trace synthesizer uses this to fill ``image_tokens``; the budget model uses it (and
``encoder_patches``) to price an image's prefill and encoder pass. Pure arithmetic on
integers: it imports nothing of the project except ``traces.errors``, and never polars,
httpx, ``loadgen`` or ``analyzers``.

Rules (docs/arithmetic.md, "Images"; reference/models-and-hardware.md section 4):

- ``qwen2-vl`` (also Qwen2.5-VL): ``smart_resize`` rounds height and width to multiples of
  28 (ViT patch 14 x merge 2) within ``min_pixels``/``max_pixels``; tokens are
  (H'/28)(W'/28). ``qwen2-vl`` uses the Hugging Face processor defaults (56*56 to
  28*28*1280 pixels); ``qwen2-vl-utils`` the qwen-vl-utils ones (4*28*28 to 16384*28*28).
  The ``<|vision_start|>``/``<|vision_end|>`` markers are not counted.
- ``llava-1.5``: CLIP ViT-L/14 at 336 px, a 24 x 24 grid: 576.
- ``llava-next``: anyres; the best grid from the pinpoints, 576 base tokens plus the
  unpadded grid features plus one newline per row (base without CLS, as vLLM counts).
- ``internvl2.5``: 448 px tiles of 256 tokens; 1 to 12 tiles chosen by aspect ratio, plus
  a thumbnail tile when there is more than one.
- ``pixtral``: patch 16, longest edge scaled down to 1024; rows x cols + rows
  (one break or end token per row).
- ``gemma3``: SigLIP at 896 px pooled to 256 tokens.
- ``llama3.2-vision``: one ``<|image|>`` token in the text; the vision states go to
  cross-attention (``vision_states`` counts them: 1,601 per 560 px tile, at most 4 tiles).
"""

from __future__ import annotations

import math

from traces.errors import ValidationError

FAMILIES: tuple[str, ...] = (
    "qwen2-vl",
    "qwen2-vl-utils",
    "llava-1.5",
    "llava-next",
    "internvl2.5",
    "pixtral",
    "gemma3",
    "llama3.2-vision",
)

_ALIASES: dict[str, str] = {
    "qwen2.5-vl": "qwen2-vl",
    "qwen2.5-vl-utils": "qwen2-vl-utils",
    "llava-v1.5": "llava-1.5",
    "llava-1.6": "llava-next",
    "llava-v1.6": "llava-next",
    "internvl": "internvl2.5",
    "internvl2": "internvl2.5",
    "internvl1.5": "internvl2.5",
    "gemma-3": "gemma3",
    "llama-3.2-vision": "llama3.2-vision",
    "mllama": "llama3.2-vision",
}

# Qwen2-VL: ViT patch 14, 2 x 2 merge, so one LM token covers a 28 x 28 pixel square.
_QWEN_FACTOR = 28
_QWEN_LIMITS: dict[str, tuple[int, int]] = {
    "qwen2-vl": (56 * 56, 28 * 28 * 1280),
    "qwen2-vl-utils": (4 * 28 * 28, 16384 * 28 * 28),
}
# LLaVA: CLIP ViT-L/14 at 336 px.
_CLIP_SIDE = 336
_CLIP_GRID = 24
_LLAVA_NEXT_PINPOINTS: tuple[tuple[int, int], ...] = (  # (height, width)
    (336, 672),
    (672, 336),
    (672, 672),
    (1008, 336),
    (336, 1008),
)
_INTERNVL_TILE = 448
_INTERNVL_TOKENS_PER_TILE = 256
_INTERNVL_PATCHES_PER_TILE = 1024  # (448 / 14)^2 before the 0.5 pixel shuffle
_INTERNVL_MAX_TILES = 12
_PIXTRAL_PATCH = 16
_PIXTRAL_LONGEST_EDGE = 1024
_GEMMA3_TOKENS = 256
_GEMMA3_PATCHES = 4096  # (896 / 14)^2, pooled to 256
_MLLAMA_TILE = 560
_MLLAMA_MAX_TILES = 4
_MLLAMA_STATES_PER_TILE = 40 * 40 + 1  # ViT-H/14 at 560 px plus CLS


def canonical_family(family: str) -> str:
    """The canonical family name for ``family`` (case-insensitive, aliases accepted)."""
    key = family.strip().lower().replace("_", "-").replace(" ", "-")
    key = _ALIASES.get(key, key)
    if key not in FAMILIES:
        raise ValidationError(
            f"unknown image-token family {family!r}; known families: {', '.join(FAMILIES)}"
        )
    return key


def _check_size(width: int, height: int) -> None:
    if width <= 0 or height <= 0:
        raise ValidationError(f"image size must be positive, got {width}x{height}")


def qwen_grid(width: int, height: int, *, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen2-VL ``smart_resize``: the resized (height, width), multiples of 28 pixels."""
    f = _QWEN_FACTOR
    h_bar = max(f, round(height / f) * f)
    w_bar = max(f, round(width / f) * f)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(f, math.floor(height / beta / f) * f)
        w_bar = max(f, math.floor(width / beta / f) * f)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / f) * f
        w_bar = math.ceil(width * beta / f) * f
    return h_bar, w_bar


def _llava_next_best_resolution(width: int, height: int) -> tuple[int, int]:
    """``select_best_resolution``: the pinpoint keeping most pixels, then wasting fewest."""
    best = _LLAVA_NEXT_PINPOINTS[0]
    best_effective = 0
    best_wasted = math.inf
    for pin_h, pin_w in _LLAVA_NEXT_PINPOINTS:
        scale = min(pin_w / width, pin_h / height)
        down_w, down_h = int(width * scale), int(height * scale)
        effective = min(down_w * down_h, width * height)
        wasted = pin_w * pin_h - effective
        if effective > best_effective or (effective == best_effective and wasted < best_wasted):
            best, best_effective, best_wasted = (pin_h, pin_w), effective, wasted
    return best


def _llava_next_grid(width: int, height: int) -> tuple[int, int, int]:
    """(tiles, unpadded feature rows, unpadded feature columns) of a LLaVA-NeXT image."""
    pin_h, pin_w = _llava_next_best_resolution(width, height)
    scale_h, scale_w = pin_h // _CLIP_SIDE, pin_w // _CLIP_SIDE
    cur_h, cur_w = _CLIP_GRID * scale_h, _CLIP_GRID * scale_w
    if width / height > cur_w / cur_h:
        new_h = int(round(height * (cur_w / width), 7))
        cur_h -= ((cur_h - new_h) // 2) * 2
    else:
        new_w = int(round(width * (cur_h / height), 7))
        cur_w -= ((cur_w - new_w) // 2) * 2
    return scale_h * scale_w, cur_h, cur_w


def internvl_tiles(width: int, height: int, *, max_tiles: int = _INTERNVL_MAX_TILES) -> int:
    """InternVL ``dynamic_preprocess``: tiles including the thumbnail (when more than one)."""
    _check_size(width, height)
    aspect = width / height
    ratios = sorted(
        {
            (i, j)
            for n in range(1, max_tiles + 1)
            for i in range(1, n + 1)
            for j in range(1, n + 1)
            if 1 <= i * j <= max_tiles
        },
        key=lambda r: r[0] * r[1],
    )
    best, best_diff = (1, 1), math.inf
    area = width * height
    for r in ratios:
        diff = abs(aspect - r[0] / r[1])
        if diff < best_diff:
            best, best_diff = r, diff
        elif diff == best_diff and area > 0.5 * _INTERNVL_TILE**2 * r[0] * r[1]:
            best = r
    tiles = best[0] * best[1]
    return tiles + 1 if tiles > 1 else tiles


def _pixtral_grid(width: int, height: int) -> tuple[int, int]:
    """(rows, cols) of 16 px patches after scaling the longest edge down to 1024."""
    ratio = max(width / _PIXTRAL_LONGEST_EDGE, height / _PIXTRAL_LONGEST_EDGE)
    if ratio > 1:
        width, height = math.floor(width / ratio), math.floor(height / ratio)
    return math.ceil(height / _PIXTRAL_PATCH), math.ceil(width / _PIXTRAL_PATCH)


def mllama_tiles(width: int, height: int) -> int:
    """Llama 3.2 Vision tiles: the canvas of at most 4 tiles of 560 px that scales least.

    Follows ``get_optimal_tiled_canvas``: the smallest upscale if any canvas needs no
    downscale, else the largest downscale; ties go to the smaller canvas.
    """
    _check_size(width, height)
    canvases = [
        (w, h)
        for w in range(1, _MLLAMA_MAX_TILES + 1)
        for h in range(1, _MLLAMA_MAX_TILES + 1)
        if w * h <= _MLLAMA_MAX_TILES
    ]
    scales = [min(w * _MLLAMA_TILE / width, h * _MLLAMA_TILE / height) for w, h in canvases]
    up = [s for s in scales if s >= 1]
    chosen = min(up) if up else max(scales)
    return min(w * h for (w, h), s in zip(canvases, scales, strict=True) if s == chosen)


def image_tokens(family: str, width: int, height: int) -> int:
    """Language-model tokens one ``width`` x ``height`` image occupies in the prompt.

    Raises ``ValidationError`` for an unknown family (listing the known ones) or a
    non-positive size.
    """
    fam = canonical_family(family)
    _check_size(width, height)
    if fam in _QWEN_LIMITS:
        lo, hi = _QWEN_LIMITS[fam]
        h_bar, w_bar = qwen_grid(width, height, min_pixels=lo, max_pixels=hi)
        return (h_bar // _QWEN_FACTOR) * (w_bar // _QWEN_FACTOR)
    if fam == "llava-1.5":
        return _CLIP_GRID * _CLIP_GRID
    if fam == "llava-next":
        _, rows, cols = _llava_next_grid(width, height)
        return _CLIP_GRID * _CLIP_GRID + rows * cols + rows
    if fam == "internvl2.5":
        return _INTERNVL_TOKENS_PER_TILE * internvl_tiles(width, height)
    if fam == "pixtral":
        rows, cols = _pixtral_grid(width, height)
        return rows * cols + rows
    if fam == "gemma3":
        return _GEMMA3_TOKENS
    return 1  # llama3.2-vision: a single <|image|> token; states go to cross-attention


def encoder_patches(family: str, width: int, height: int) -> int:
    """ViT patch positions the vision encoder processes for one image (its FLOP driver)."""
    fam = canonical_family(family)
    _check_size(width, height)
    if fam in _QWEN_LIMITS:
        return 4 * image_tokens(fam, width, height)  # 2 x 2 patches merge into one token
    if fam == "llava-1.5":
        return _CLIP_GRID * _CLIP_GRID
    if fam == "llava-next":
        tiles, _, _ = _llava_next_grid(width, height)
        return (1 + tiles) * _CLIP_GRID * _CLIP_GRID  # base image plus each grid tile
    if fam == "internvl2.5":
        return _INTERNVL_PATCHES_PER_TILE * internvl_tiles(width, height)
    if fam == "pixtral":
        rows, cols = _pixtral_grid(width, height)
        return rows * cols
    if fam == "gemma3":
        return _GEMMA3_PATCHES
    return vision_states(fam, width, height)


def vision_states(family: str, width: int, height: int) -> int:
    """Vision states held in cross-attention KV (Llama 3.2 Vision); 0 for other families."""
    fam = canonical_family(family)
    if fam != "llama3.2-vision":
        return 0
    return _MLLAMA_STATES_PER_TILE * mllama_tiles(width, height)
