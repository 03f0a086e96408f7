"""Rendering chat messages to token ids with a tokenizer's own chat template, tools included.

Two renders matter for token-in-token-out:

* :meth:`ChatTemplate.render_ids` renders a whole conversation (the first turn of a
  session, or a fresh branch) and tokenizes it once;
* :meth:`ChatTemplate.continuation_ids` renders only what follows an assistant turn the
  engine produced: the rest of that turn's closing (``<|im_end|>\\n`` less the
  end-of-turn token the engine already emitted), the new messages and the generation
  prompt. It uses a fixed base conversation ``[user, assistant(SENTINEL)] + new``
  and keeps the text after the sentinel, so earlier turns are never re-rendered and
  template logic that rewrites old turns (Qwen3 drops old reasoning) cannot leak in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tackroom import ConfigError

_SENTINEL = "\u2063tackroom-sentinel\u2063"
_BASE_USER = "\u2063tackroom-base\u2063"


class ChatTemplateError(ConfigError):
    """The tokenizer's chat template cannot render these messages the way the gateway needs."""


IMAGE_PART_TYPES = ("image_url", "input_image", "image")


def image_placeholder(part: dict[str, Any]) -> str:
    """The text a text-only token path renders for an image content part (and records as the model's input).

    The engine behind the gateway takes token ids, which carry no pixels; rather than drop the image silently,
    the prompt says one was there, what type and how big. ``data:`` URLs are described, never spelled out.
    """
    ref = part.get("image_url", part.get("url", part.get("image", "")))
    url = str(ref.get("url", "") if isinstance(ref, dict) else ref or "")
    if url.startswith("data:"):
        head, _, payload = url.partition(",")
        mime = head[5:].split(";")[0] or "unknown type"
        size = len(payload) * 3 // 4 - payload[-2:].count("=") if ";base64" in head else len(payload)
        what = f"{mime}, {size:,} bytes"
    else:
        what = url[:200] or "no url"
    return f"[image {what}: not shown, this model reads text only]"


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return ""
    if part.get("type") == "text":
        return part.get("text") or ""
    if part.get("type") in IMAGE_PART_TYPES:
        return image_placeholder(part)
    return ""


def _plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages the way templates expect them: string content (image parts as :func:`image_placeholder`'s text),
    tool-call arguments as objects when JSON."""
    out = []
    for m in messages:
        m = dict(m)
        content = m.get("content")
        if content is None:
            m["content"] = ""
        elif isinstance(content, list):
            m["content"] = "".join(_part_text(p) for p in content)
        if m.get("tool_calls"):
            calls = []
            for tc in m["tool_calls"]:
                tc = dict(tc)
                fn = dict(tc.get("function") or {})
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        fn["arguments"] = json.loads(args)
                    except ValueError:
                        pass
                tc["function"] = fn
                calls.append(tc)
            m["tool_calls"] = calls
        out.append(m)
    return out


class ChatTemplate:
    """A HF tokenizer plus its chat template, rendering to exact token ids.

    ``end_of_turn_id`` is the token the template closes an assistant turn with
    (``<|im_end|>`` for ChatML templates); the engine is asked to stop on it and,
    when a completion ends with it, the continuation render skips it.
    """

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template; "
                "use a tokenizer folder whose tokenizer_config.json or chat_template.jinja has one"
            )
        self.tokenizer = tokenizer
        self.name_or_path = str(getattr(tokenizer, "name_or_path", ""))
        self._backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
        self.closing_text, self.end_of_turn_text = self._assistant_closing()
        """What the template writes after an assistant message's content (e.g. ``<|im_end|>\\n``)."""
        self.end_of_turn_id: int | None = None
        if self.end_of_turn_text:
            ids = self.encode(self.end_of_turn_text)
            if len(ids) == 1:
                self.end_of_turn_id = ids[0]
        self.think_tokens = all(t in tokenizer.get_vocab() for t in ("<think>", "</think>"))

    @classmethod
    def from_path(cls, path: str | Path) -> ChatTemplate:
        from tackroom_gateway.tokenizers import load_tokenizer

        return cls(load_tokenizer(str(path)))

    # -- rendering -----------------------------------------------------------------
    def render(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        template_kwargs: dict[str, Any] | None = None,
    ) -> str:
        try:
            return self.tokenizer.apply_chat_template(
                _plain(messages),
                tools=tools or None,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                **(template_kwargs or {}),
            )
        except Exception as exc:  # jinja2 errors from a template we do not control
            raise ChatTemplateError(f"chat template of {self.name_or_path!r} failed to render: {exc}") from exc

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token strings in it become their ids, nothing is added."""
        if self._backend is not None:  # the Rust tokenizer directly: same ids, a fraction of the wrapper's cost
            return self._backend.encode(text, add_special_tokens=False).ids
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def render_ids(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> list[int]:
        """The whole conversation plus the generation prompt, tokenized once."""
        return self.encode(self.render(messages, tools=tools, template_kwargs=template_kwargs))

    # -- continuation ----------------------------------------------------------------
    def _assistant_closing(self) -> tuple[str, str]:
        """What the template writes after an assistant message's content, and its leading special token."""
        text = self.render(
            [{"role": "user", "content": _BASE_USER}, {"role": "assistant", "content": _SENTINEL}],
            add_generation_prompt=False,
        )
        if _SENTINEL not in text:
            raise ChatTemplateError(
                f"chat template of {self.name_or_path!r} does not render assistant content verbatim; "
                "the gateway cannot extend turns with it"
            )
        closing = text[text.index(_SENTINEL) + len(_SENTINEL) :]
        eot = ""
        for tok in sorted(self.tokenizer.all_special_tokens + list(self.tokenizer.get_added_vocab()), key=len, reverse=True):
            if tok and closing.startswith(tok):
                eot = tok
                break
        return closing, eot

    def continuation_text(
        self,
        new_messages: list[dict[str, Any]],
        *,
        closed: bool,
        tools: list[dict[str, Any]] | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> str:
        """Text that follows an engine-produced assistant turn: its closing, ``new_messages``, the generation prompt.

        ``closed`` says the completion already ended with the end-of-turn token, so
        only the rest of the closing (e.g. ``\\n``) is added.
        """
        base = [{"role": "user", "content": _BASE_USER}, {"role": "assistant", "content": _SENTINEL}]
        text = self.render(base + list(new_messages), tools=tools, template_kwargs=template_kwargs)
        at = text.find(_SENTINEL)
        if at < 0:
            raise ChatTemplateError(f"chat template of {self.name_or_path!r} dropped the assistant turn while rendering")
        tail = text[at + len(_SENTINEL) :]
        if closed and self.end_of_turn_text and tail.startswith(self.end_of_turn_text):
            tail = tail[len(self.end_of_turn_text) :]
        return tail

    def continuation_ids(
        self,
        new_messages: list[dict[str, Any]],
        *,
        closed: bool,
        tools: list[dict[str, Any]] | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> list[int]:
        return self.encode(
            self.continuation_text(new_messages, closed=closed, tools=tools, template_kwargs=template_kwargs)
        )
