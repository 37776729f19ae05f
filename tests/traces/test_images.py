"""Synthetic images: exact size, deterministic bytes, realistic sizes, clear errors."""

from __future__ import annotations

import base64
import io

import pytest

from traces.prompts.images import image_data_url, synthetic_image

Image = pytest.importorskip("PIL.Image", reason="the images extra (Pillow) is not installed")


def _decode(url: str) -> tuple[str, bytes]:
    head, _, payload = url.partition(",")
    return head, base64.b64decode(payload, validate=True)


@pytest.mark.parametrize("fmt", ["png", "jpeg"])
@pytest.mark.parametrize(("width", "height"), [(1, 1), (17, 5), (336, 336), (1280, 720)])
def test_data_url_decodes_to_the_exact_size(fmt: str, width: int, height: int) -> None:
    url = image_data_url(width, height, seed=3, fmt=fmt)
    head, data = _decode(url)
    assert head == f"data:image/{fmt};base64"
    with Image.open(io.BytesIO(data)) as img:
        assert img.size == (width, height)
        assert img.format == fmt.upper()
        assert img.mode == "RGB"


def test_same_seed_same_bytes_other_seed_other_bytes() -> None:
    a = synthetic_image(200, 100, seed=1)
    assert synthetic_image.__wrapped__(200, 100, seed=1) == a  # not only the cache
    assert synthetic_image(200, 100, seed=2) != a
    assert image_data_url(200, 100, seed=1) is image_data_url(200, 100, seed=1)  # cached


def test_images_are_not_flat_and_sizes_are_realistic() -> None:
    png = synthetic_image(1024, 768, seed=5)
    jpeg = synthetic_image(1024, 768, seed=5, fmt="jpeg")
    # A flat 1024x768 PNG is ~3 KB; a photo is hundreds of KB as PNG, ~50-200 KB as JPEG.
    assert 200_000 < len(png) < 3_000_000
    assert 40_000 < len(jpeg) < 400_000
    with Image.open(io.BytesIO(png)) as img:
        colours = img.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 10_000


@pytest.mark.parametrize(
    ("width", "height", "fmt", "match"),
    [
        (0, 10, "png", "size"),
        (10, -1, "png", "size"),
        (20_000, 10, "png", "size"),
        (10, 10, "gif", "format"),
    ],
)
def test_bad_arguments_raise(width: int, height: int, fmt: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        synthetic_image(width, height, seed=0, fmt=fmt)
