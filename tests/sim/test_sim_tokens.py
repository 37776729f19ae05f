"""Prompt token counting and generated token text."""

from __future__ import annotations

import pytest

from loadgen.errors import PromptShapeError
from loadgen.sim.tokens import (
    count_chat_prompt,
    count_completion_prompt,
    token_text,
)


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("", 0),
        ("one", 1),
        ("  one two\tthree\nfour  ", 4),
        (["a b", "c"], 3),
        ([1, 2, 3], 3),
        ([[1, 2], [3]], 3),
        (["a b", [1, 2, 3]], 5),
    ],
)
def test_completion_prompt_counts_words_or_token_ids(prompt: object, expected: int) -> None:
    assert count_completion_prompt(prompt) == expected


@pytest.mark.parametrize("prompt", [None, 3, {"a": 1}, [1.5], [True]])
def test_completion_prompt_rejects_other_shapes(prompt: object) -> None:
    with pytest.raises(PromptShapeError):
        count_completion_prompt(prompt)


def test_chat_prompt_sums_string_and_text_parts_and_images() -> None:
    messages = [
        {"role": "system", "content": "you are terse"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "describe this picture"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
                {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
            ],
        },
        {"role": "assistant", "content": None, "tool_calls": []},
    ]
    assert count_chat_prompt(messages, image_tokens=0) == 6
    assert count_chat_prompt(messages, image_tokens=100) == 206


@pytest.mark.parametrize(
    "messages",
    [[], None, "hello", [1], [{"role": "user", "content": 5}], [{"content": [{"type": "text"}]}]],
)
def test_chat_prompt_rejects_bad_messages(messages: object) -> None:
    with pytest.raises(PromptShapeError):
        count_chat_prompt(messages, image_tokens=0)


def test_token_text_is_one_word_with_a_leading_space_per_token() -> None:
    text = token_text(0, 50)
    assert text.startswith(" ")
    assert len(text.split()) == 50
    assert text.count(" ") == 50


def test_token_text_is_deterministic_and_splits_cleanly() -> None:
    whole = token_text(0, 2000)
    assert whole == token_text(0, 2000)
    assert token_text(0, 3) + token_text(3, 4) + token_text(7, 1993) == whole
    assert token_text(5, 0) == ""
