"""Re-rendering a conversation through the policy's chat template, the way the policy gateway would have sent it.

Used when the teacher's tokens are not the policy's (another tokenizer, or an endpoint that returns text only).
The ids are built exactly as the gateway builds a session's, so an episode of the policy and a re-rendered
demonstration of the same conversation agree token for token:

- the prompt up to the first assistant message: the whole conversation so far, rendered once with the generation
  prompt (``ChatTemplate.render_ids``);
- each assistant message the teacher wrote: its text as the template renders it after that prompt (content,
  reasoning and tool calls in the template's own markup) up to and including the end-of-turn token: the tokens the
  policy should have generated (loss mask 1); an assistant message the harness wrote itself is context, like a
  tool result;
- what follows it up to the next assistant message (tool results, user turns): the gateway's continuation render
  (``ChatTemplate.continuation_ids``: the rest of the closing, the new messages, the generation prompt), mask 0.

Messages after the last assistant message teach nothing and are left out. Only a message's role, content, tool
calls, name, tool-call id and reasoning reach the template: no other field of a transcript is read, so no id an
agent wrote into one can reach a demonstration.
"""

from __future__ import annotations

from typing import Any

from tackroom_gateway import ChatTemplate, ChatTemplateError

_BASE_USER = "\u2063tackroom-collect-base\u2063"
_SENTINEL = "\u2063tackroom-collect-sentinel\u2063"
_RENDERED_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content")


class RenderError(ValueError):
    """A conversation the policy's template cannot turn into a demonstration; the message says why."""


def rendered_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each message with only the fields a chat template reads (see the module docstring)."""
    out = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RenderError(f"not a chat message: {str(m)[:120]}")
        out.append({k: m[k] for k in _RENDERED_KEYS if k in m and m[k] is not None})
    return out


def render_conversation(template: ChatTemplate, messages: list[dict[str, Any]], *,
                        tools: list[dict[str, Any]] | None = None,
                        template_kwargs: dict[str, Any] | None = None,
                        replies: set[int] | None = None) -> tuple[list[int], list[int]]:
    """``(input_ids, loss_mask)`` of ``messages`` in ``template``'s tokenizer, mask 1 exactly on the assistant
    messages' tokens; :class:`RenderError` when there is no assistant message after a prompt or the template
    renders an assistant message in a way the gateway could not have produced.

    ``replies``: the indices of the assistant messages the teacher wrote (None: every assistant message). Any
    other assistant message is one the harness put into the conversation itself (OpenCode's "maximum steps
    reached" notice): it is rendered where it stands, as the gateway renders it for the policy, at mask 0."""
    messages = rendered_messages(messages)
    at = [i for i, m in enumerate(messages) if m["role"] == "assistant" and (replies is None or i in replies)]
    if not at:
        raise RenderError("the conversation has no assistant message: nothing to learn")
    if at[0] == 0:
        raise RenderError("the conversation starts with an assistant message: there is no prompt before it")
    options = {"tools": tools or None, "template_kwargs": template_kwargs or None}
    closed = bool(template.end_of_turn_text)
    ids: list[int] = []
    mask: list[int] = []
    try:
        context = messages[: at[0]]
        prompt = template.render(context, **options)
        _extend(ids, mask, template.encode(prompt), 0)
        for n, i in enumerate(at):
            text = _assistant_text(template, context, messages[i], prompt, options, based=n > 0)
            _extend(ids, mask, template.encode(text), 1)
            if n + 1 == len(at):
                break
            new = messages[i + 1: at[n + 1]]
            _extend(ids, mask, template.continuation_ids(new, closed=closed, **options), 0)
            context = [{"role": "user", "content": _BASE_USER}, {"role": "assistant", "content": _SENTINEL}, *new]
            prompt = template.render(context, **options)
    except ChatTemplateError as exc:
        raise RenderError(str(exc)) from exc
    return ids, mask


def _extend(ids: list[int], mask: list[int], piece: list[int], value: int) -> None:
    ids.extend(piece)
    mask.extend([value] * len(piece))


def _assistant_text(template: ChatTemplate, context: list[dict[str, Any]], message: dict[str, Any], prompt: str,
                    options: dict[str, Any], *, based: bool) -> str:
    """What ``template`` writes for ``message`` after ``context`` (rendered as ``prompt``, generation prompt
    included), through the end-of-turn token: what the policy generates at that point. ``based``: ``context``
    starts with the fixed base of a continuation, whose render is compared from its sentinel on."""
    full = template.render([*context, message], add_generation_prompt=False, tools=options["tools"],
                           template_kwargs=options["template_kwargs"])
    if based:  # the base's sentinel comes first; what precedes it is the same in both renders
        full, prompt = full[full.find(_SENTINEL):], prompt[prompt.find(_SENTINEL):]
    if not full.startswith(prompt):
        raise RenderError(f"chat template of {template.name_or_path!r} renders an assistant message other than "
                          "after its generation prompt, so no engine could have produced it token for token")
    body = full[len(prompt):]
    closing = template.closing_text
    if not closing or not body.endswith(closing):
        raise RenderError(f"chat template of {template.name_or_path!r} does not close an assistant message with "
                          f"{closing!r} when it is the last one")
    return body[: len(body) - len(closing)] + template.end_of_turn_text
