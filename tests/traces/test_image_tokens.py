"""Image-token rules against the worked table of reference/models-and-hardware.md §4."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from traces.errors import ValidationError
from traces.prompts.image_tokens import (
    FAMILIES,
    encoder_patches,
    image_tokens,
    internvl_tiles,
    mllama_tiles,
    vision_states,
)

# (height, width) -> tokens per family, copied from the §4 table (H x W).
TABLE: dict[tuple[int, int], dict[str, int]] = {
    (336, 336): {"qwen2-vl": 144, "qwen2-vl-utils": 144, "llava-1.5": 576, "llava-next": 1176,
                 "internvl2.5": 256, "pixtral": 462, "gemma3": 256},
    (448, 448): {"qwen2-vl": 256, "qwen2-vl-utils": 256, "llava-1.5": 576, "llava-next": 2928,
                 "internvl2.5": 256, "pixtral": 812, "gemma3": 256},
    (768, 1024): {"qwen2-vl": 999, "qwen2-vl-utils": 999, "llava-1.5": 576, "llava-next": 2340,
                  "internvl2.5": 3328, "pixtral": 3120, "gemma3": 256},
    (1080, 1920): {"qwen2-vl": 1222, "qwen2-vl-utils": 2691, "llava-1.5": 576,
                   "llava-next": 1948, "internvl2.5": 2304, "pixtral": 2340, "gemma3": 256},
    (3024, 4032): {"qwen2-vl": 1230, "qwen2-vl-utils": 15552, "llava-1.5": 576,
                   "llava-next": 2340, "internvl2.5": 3328, "pixtral": 3120, "gemma3": 256},
    (2048, 2048): {"qwen2-vl": 1225, "qwen2-vl-utils": 5329, "llava-1.5": 576,
                   "llava-next": 2928, "internvl2.5": 2560, "pixtral": 4160, "gemma3": 256},
}  # fmt: skip

CASES = [(h, w, fam, n) for (h, w), row in TABLE.items() for fam, n in row.items()]


@pytest.mark.parametrize(("height", "width", "family", "expected"), CASES)
def test_worked_table(height: int, width: int, family: str, expected: int) -> None:
    assert image_tokens(family, width, height) == expected


def test_internvl_tile_choices_match_the_table_notes() -> None:
    assert internvl_tiles(1024, 768) == 13  # 4x3 + thumbnail
    assert internvl_tiles(1920, 1080) == 9  # 4x2 + thumbnail
    assert internvl_tiles(2048, 2048) == 10  # 3x3 + thumbnail
    assert internvl_tiles(336, 336) == 1  # one tile, no thumbnail


def test_llama_vision_is_one_text_token_and_up_to_6404_states() -> None:
    assert image_tokens("llama3.2-vision", 1920, 1080) == 1
    assert vision_states("llama3.2-vision", 560, 560) == 1601
    assert vision_states("llama3.2-vision", 4000, 3000) == 6404
    assert mllama_tiles(1120, 1120) == 4
    assert vision_states("gemma3", 896, 896) == 0


def test_qwen_encoder_patches_are_four_per_token() -> None:
    # ref §4: 1,222 merged tokens -> 4,888 patches
    assert encoder_patches("qwen2-vl", 1920, 1080) == 4888
    assert encoder_patches("gemma3", 100, 100) == 4096


def test_aliases_and_case() -> None:
    assert image_tokens("Qwen2.5-VL", 1920, 1080) == 1222
    assert image_tokens("LLAVA_1.6", 448, 448) == 2928


def test_unknown_family_lists_known_ones() -> None:
    with pytest.raises(ValidationError) as err:
        image_tokens("dalle", 10, 10)
    for fam in FAMILIES:
        assert fam in str(err.value)


def test_bad_size_is_rejected() -> None:
    with pytest.raises(ValidationError, match="positive"):
        image_tokens("pixtral", 0, 10)


sizes = st.integers(min_value=28, max_value=8000)


@given(st.sampled_from(FAMILIES), sizes, sizes)
def test_tokens_are_positive_and_bounded(family: str, width: int, height: int) -> None:
    n = image_tokens(family, width, height)
    assert n >= 1
    assert encoder_patches(family, width, height) >= 1
    caps = {"qwen2-vl": 1280, "llava-next": 2928, "internvl2.5": 13 * 256, "pixtral": 4160}
    assert n <= caps.get(family, 16384)
