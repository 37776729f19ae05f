"""A request's prompt content as the engine simulator needs it: text, token ids and images.

:func:`prompt_content` collects the text of a completions ``prompt`` or of chat ``messages``
(string contents and ``text`` parts, joined by newlines, in order), any token-id lists, and
the pixel size of each image part. Sizes are read from the header of a ``data:`` URL (PNG
IHDR, JPEG SOF, GIF, WebP VP8/VP8L); an image whose size cannot be read (a remote URL, an
unknown format) is ``None`` and costs the configured fixed ``--image-tokens``.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from loadgen.sim.physics import ImageSize

_HEAD_B64 = 96  # base64 characters enough for the PNG/GIF/WebP headers
_JPEG_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE})


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptContent:
    """The parts of a prompt the engine tokenizes, prefix-caches and encodes."""

    text: str = ""
    token_ids: tuple[int, ...] = ()
    images: tuple[ImageSize | None, ...] = ()


def prompt_content(body: Mapping[str, object], *, api: str) -> PromptContent:
    """The prompt content of an already validated request body of ``api``: chat's
    ``messages``, completions' ``prompt``, the Responses API's ``input`` (a string or
    messages) or the embeddings' ``input`` (as completions' ``prompt``)."""
    texts: list[str] = []
    ids: list[int] = []
    images: list[ImageSize | None] = []
    value = body.get("input")
    if api == "responses" and isinstance(value, str):
        texts.append(value)
    elif api in ("chat", "responses"):
        messages = body.get("messages") if api == "chat" else value
        for message in messages if isinstance(messages, list) else ():
            if isinstance(message, str):
                texts.append(message)
                continue
            content = message.get("content") if isinstance(message, Mapping) else None
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                _parts(content, texts, images)
    else:
        prompt = body.get("prompt") if api == "completions" else value
        items = prompt if isinstance(prompt, list) else [prompt]
        if items and all(isinstance(x, int) for x in items):
            items = [items]
        for item in items:
            if isinstance(item, str):
                texts.append(item)
            elif isinstance(item, list):
                ids.extend(x for x in item if isinstance(x, int))
    return PromptContent(text="\n".join(texts), token_ids=tuple(ids), images=tuple(images))


def _parts(parts: list[object], texts: list[str], images: list[ImageSize | None]) -> None:
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping):
            kind = part.get("type")
            if kind in ("text", "input_text") and isinstance(part.get("text"), str):
                texts.append(str(part["text"]))
            elif kind in ("image_url", "image", "input_image"):
                ref = part.get("image_url", part.get("image"))
                url = ref.get("url") if isinstance(ref, Mapping) else ref
                images.append(image_size(url) if isinstance(url, str) else None)


def image_size(url: str) -> ImageSize | None:
    """Width and height of a ``data:image/...;base64,`` URL, or None if not readable."""
    if not url.startswith("data:"):
        return None
    comma = url.find(",")
    if comma < 0 or ";base64" not in url[:comma]:
        return None
    payload = url[comma + 1 :]
    try:
        head = base64.b64decode(payload[:_HEAD_B64])
        size = _header_size(head)
        if size is None and head[:2] == b"\xff\xd8":
            size = _jpeg_size(base64.b64decode(payload))
    except (binascii.Error, ValueError, struct.error):
        return None
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    return ImageSize(width=size[0], height=size[1])


def _header_size(head: bytes) -> tuple[int, int] | None:
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        width, height = struct.unpack(">II", head[16:24])
        return int(width), int(height)
    if head[:6] in (b"GIF87a", b"GIF89a"):
        width, height = struct.unpack("<HH", head[6:10])
        return int(width), int(height)
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        if head[12:16] == b"VP8 ":
            width, height = struct.unpack("<HH", head[26:30])
            return int(width) & 0x3FFF, int(height) & 0x3FFF
        if head[12:16] == b"VP8L":
            bits = int.from_bytes(head[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            i += 1
            continue
        marker = data[i + 1]
        if marker in _JPEG_SOF:
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return int(width), int(height)
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7 or marker == 0xFF:
            i += 1 if marker == 0xFF else 2
            continue
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        i += 2 + int(length)
    return None
