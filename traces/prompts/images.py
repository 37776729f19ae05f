"""Deterministic synthetic images for image requests, as bytes or ``data:`` URLs.

``image_data_url(width, height, seed=...)`` returns ``data:image/png;base64,...`` for an
image of exactly ``width`` x ``height`` pixels whose content is a pure function of the
seed: a colour gradient, a smooth seeded texture, seeded fine-noise patches and a few
shapes, so that encoded sizes resemble real photos and screenshots (a flat colour would
compress to nothing and under-load the server's decoder and the network). Results are
cached by (width, height, seed, format). Encoding a large image takes tens of
milliseconds: the replay calls this ahead of the due time, in a worker thread.

Pillow is an optional extra (``pip install 'llm-loadgen[images]'``), imported on first use.
Imports nothing of the project but ``traces.errors``.
"""

from __future__ import annotations

import base64
import io
import random
from functools import lru_cache
from typing import TYPE_CHECKING, Final, Literal

from traces.errors import MissingExtraError

if TYPE_CHECKING:
    from PIL import Image as PILImage

ImageFormat = Literal["png", "jpeg"]
FORMATS: Final[tuple[ImageFormat, ...]] = ("png", "jpeg")
MAX_SIDE: Final = 16_384
JPEG_QUALITY: Final = 85


def _pil() -> type[PILImage.Image]:
    try:
        from PIL import Image
    except ImportError as exc:
        raise MissingExtraError(
            "synthetic images need Pillow: pip install 'llm-loadgen[images]'"
        ) from exc
    return Image.Image


def _check(width: int, height: int, fmt: str) -> None:
    if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
        raise ValueError(f"image size must be 1..{MAX_SIDE} pixels a side, got {width}x{height}")
    if fmt not in FORMATS:
        raise ValueError(f"unknown image format {fmt!r}; expected one of {', '.join(FORMATS)}")


def _render(width: int, height: int, seed: int) -> PILImage.Image:
    """The image for ``seed``: gradient + smooth texture + noise patches + shapes."""
    _pil()
    from PIL import Image, ImageDraw

    rng = random.Random(f"llm-loadgen/image/{seed}")
    size = (width, height)
    # Two-colour gradient along a seeded direction.
    ramp = Image.linear_gradient("L").rotate(rng.uniform(0, 360)).resize(size)
    first = Image.new("RGB", size, tuple(rng.randrange(256) for _ in range(3)))
    second = Image.new("RGB", size, tuple(rng.randrange(256) for _ in range(3)))
    img = Image.composite(first, second, ramp)
    # Smooth texture: a coarse random grid upscaled bicubically (like out-of-focus detail).
    gw, gh = max(2, width // 24), max(2, height // 24)
    texture = Image.frombytes("RGB", (gw, gh), rng.randbytes(gw * gh * 3))
    img = Image.blend(img, texture.resize(size, Image.Resampling.BICUBIC), 0.35)
    draw = ImageDraw.Draw(img)
    # Shapes: flat regions with edges, as in screenshots and diagrams.
    for _ in range(rng.randint(4, 12)):
        x0, y0 = rng.randrange(width), rng.randrange(height)
        x1 = min(width, x0 + rng.randint(1, max(1, width // 3)))
        y1 = min(height, y0 + rng.randint(1, max(1, height // 3)))
        colour = tuple(rng.randrange(256) for _ in range(3))
        if rng.random() < 0.5:
            draw.rectangle((x0, y0, x1, y1), fill=colour)
        else:
            draw.ellipse((x0, y0, x1, y1), outline=colour, width=max(1, min(width, height) // 200))
    # Fine-noise patches (high-frequency detail, like foliage or text): ~12% of the area.
    for _ in range(rng.randint(3, 6)):
        pw = rng.randint(1, max(1, width // 4))
        ph = rng.randint(1, max(1, height // 4))
        patch = Image.frombytes("RGB", (pw, ph), rng.randbytes(pw * ph * 3))
        x, y = rng.randrange(width - pw + 1), rng.randrange(height - ph + 1)
        under = img.crop((x, y, x + pw, y + ph))
        img.paste(Image.blend(under, patch, 0.5), (x, y))
    return img


@lru_cache(maxsize=64)
def synthetic_image(width: int, height: int, *, seed: int, fmt: ImageFormat = "png") -> bytes:
    """Encoded bytes (PNG or JPEG) of the deterministic image for ``seed``, exactly
    ``width`` x ``height`` pixels. Equal arguments give equal bytes (same Pillow)."""
    _check(width, height, fmt)
    img = _render(width, height, seed)
    buf = io.BytesIO()
    if fmt == "png":
        img.save(buf, format="PNG", optimize=False, compress_level=1)
    else:
        img.save(buf, format="JPEG", quality=JPEG_QUALITY, optimize=False)
    return buf.getvalue()


@lru_cache(maxsize=64)
def image_data_url(width: int, height: int, *, seed: int, fmt: ImageFormat = "png") -> str:
    """``data:image/<fmt>;base64,...`` of ``synthetic_image(width, height, seed, fmt)``."""
    data = synthetic_image(width, height, seed=seed, fmt=fmt)
    return f"data:image/{fmt};base64,{base64.b64encode(data).decode('ascii')}"
