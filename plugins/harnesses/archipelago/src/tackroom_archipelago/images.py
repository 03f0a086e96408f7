"""Images in tool results: checked, capped, and shown to the model as image content or as a text placeholder.

An MCP ``ImageContent`` block (Mercor's ``read_image_file``) is checked before it goes anywhere: its base64
must decode, its bytes must start like a PNG, JPEG, GIF or WebP file (the sniffed type wins over the type the
server claims), and it must be at most ``max_bytes``; a block that fails becomes a one-line note for the model,
never an exception. A kept image reaches the model in one of two shapes:

* ``send``: the tool message says where the image is, and a user message right after the turn's tool messages
  carries it as an OpenAI content part ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``
  (user, because OpenAI-style APIs accept images only there);
* ``placeholder``: the tool message carries :func:`tackroom_gateway.image_placeholder`'s text instead.

A text-only token path (``/v1/completions`` with token ids, or the policy gateway in front of such an engine)
cannot carry pixels, so it records the placeholder's tokens: the gateway renders an image part as exactly
that text, so the trainer's ids are what the model read.
"""

from __future__ import annotations

import base64
import binascii

from mcp.types import ImageContent
from pydantic import BaseModel

from tackroom_gateway import image_placeholder

DEFAULT_IMAGE_MAX_BYTES = 5_000_000
"""Per image, decoded (the smallest common API limit)."""

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


class ToolImage(BaseModel):
    """An image a tool returned that passed the checks."""

    mime_type: str
    data: str
    """Base64, as the server sent it (validated)."""
    size: int
    """Decoded bytes."""

    @property
    def data_url(self) -> str:
        return f"data:{self.mime_type};base64,{self.data}"

    def content_part(self) -> dict[str, object]:
        return {"type": "image_url", "image_url": {"url": self.data_url}}

    def placeholder(self) -> str:
        return image_placeholder(self.content_part())


def sniff(raw: bytes) -> str | None:
    """The image type the bytes say they are (PNG, JPEG, GIF, WebP), or None."""
    for magic, mime in _MAGIC:
        if raw.startswith(magic):
            return mime
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp"
    return None


def read_image(block: ImageContent, max_bytes: int) -> ToolImage | str:
    """The checked image, or a note for the model saying why it was dropped."""
    claimed = block.mime_type or "unknown type"
    data = block.data or ""
    approx = len(data) * 3 // 4 - data[-2:].count("=")
    if approx > max_bytes:  # judged before decoding: a hostile server's huge blob is never decoded
        return f"[image dropped: about {approx:,} bytes ({claimed}), over the {max_bytes:,}-byte limit per image]"
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return f"[image dropped: the server sent data that is not valid base64 ({claimed})]"
    mime = sniff(raw)
    if mime is None:
        return f"[image dropped: {len(raw):,} bytes claimed as {claimed} are not a PNG, JPEG, GIF or WebP image]"
    return ToolImage(mime_type=mime, data=data, size=len(raw))
