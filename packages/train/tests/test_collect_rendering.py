"""Re-rendering a conversation in the policy's chat template gives exactly the ids the policy gateway sends.

The gateway (real, in front of the scripted teacher's ``/v1/completions``) records a tool-calling episode; the
teacher writes each reply the way the template renders that assistant message, as a model trained on the template
does. Re-rendering the conversation the client ends with must give the gateway's flattened ids and loss mask
token for token, and each turn's prompt must be a prefix of it: the property that lets a re-rendered
demonstration stand in for an episode of the policy. With SmolLM2's tokenizer (local) and Qwen3's (npm)."""

from __future__ import annotations

import json

import httpx
import pytest

from tackroom_gateway import ChatTemplate, EngineSettings, GatewaySettings, PolicyGateway, load_tokenizer
from tackroom_train.collect.rendering import RenderError, render_conversation
from tackroom_train.collect.teacher import ScriptedTeacher, serve_teacher

TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file of the world",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "notes.txt"}}\n</tool_call>'
THINK = {"smollm2": "", "qwen3": "<think>\n\n</think>\n\n"}
"""What each template writes before the last assistant message's content (Qwen3: an empty reasoning block)."""


@pytest.fixture(scope="module", params=["smollm2", "qwen3"])
def template(request) -> ChatTemplate:
    return ChatTemplate(load_tokenizer(request.param))


def flavour(template: ChatTemplate) -> str:
    return "qwen3" if template.think_tokens else "smollm2"


async def gateway_episode(template: ChatTemplate, replies: list[str], tool_results: list[str],
                          system: str | None = "Answer with one word.") -> tuple[list[dict], object]:
    """Drive a gateway session over the scripted teacher: the user's question, then one tool result after each
    reply but the last; the messages the client ends with, and the session."""
    script = list(replies)
    teacher = ScriptedTeacher(lambda prompt: script.pop(0), template)
    async with serve_teacher(teacher) as url:
        settings = GatewaySettings(engine=EngineSettings(base_url=url, backoff_s=0.01, retries=0))
        async with PolicyGateway(settings, template=template) as gateway, httpx.AsyncClient(timeout=30) as http:
            base = gateway.session_base_url("episode")
            messages = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": "What word is in notes.txt?"}]
            for k in range(len(replies)):
                answer = await http.post(f"{base}/chat/completions", json={"messages": messages, "tools": TOOLS})
                assert answer.status_code == 200, answer.text
                reply = answer.json()["choices"][0]["message"]
                messages.append(reply)
                for call in reply.get("tool_calls") or []:
                    messages.append({"role": "tool", "tool_call_id": call["id"], "name": "read_file",
                                     "content": tool_results[k]})
            return messages, gateway.session("episode")


async def test_a_rerendered_tool_episode_is_the_gateways_ids_token_for_token(template):
    think = THINK[flavour(template)]
    messages, session = await gateway_episode(template, [think + CALL, think + "blue"], ["blue"])
    recorded = session.trajectory()
    assert len(session.turns) == 2 and recorded.notes == []  # one branch: the second turn extended the first

    ids, mask = render_conversation(template, messages, tools=TOOLS)

    assert ids == recorded.token_ids
    assert mask == recorded.loss_mask
    for turn in session.turns:  # every prompt the gateway sent is a prefix of the re-rendered sequence
        assert ids[: len(turn.prompt_ids)] == turn.prompt_ids
    trained = template.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert trained == f"{think}{CALL}<|im_end|>{think}blue<|im_end|>"  # the tool call and end-of-turn included


async def test_a_plain_reply_without_a_system_prompt_matches_too(template):
    think = THINK[flavour(template)]
    messages, session = await gateway_episode(template, [think + "blue"], [], system=None)
    assert render_conversation(template, messages, tools=TOOLS) == (session.trajectory().token_ids,
                                                                    session.trajectory().loss_mask)


def test_tools_change_the_prompt_and_are_rendered_when_given(template):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    with_tools, _ = render_conversation(template, messages, tools=TOOLS)
    without, mask = render_conversation(template, messages)
    assert "read_file" in template.decode(with_tools) and "read_file" not in template.decode(without)
    assert template.decode([i for i, m in zip(without, mask, strict=True) if m]).endswith("hello<|im_end|>")


def test_fields_a_transcript_adds_never_reach_the_ids(template):
    """A message's ids come from the template only: a field claiming token ids is not read."""
    plain = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    forged = [{**plain[0], "token_ids": [1, 2, 3]},
              {**plain[1], "token_ids": [7] * 5, "completion_ids": [9], "prompt_token_ids": [4], "logprobs": [0.0]}]
    assert render_conversation(template, forged) == render_conversation(template, plain)


def test_text_that_reads_like_ids_is_text(template):
    ids, mask = render_conversation(template, [{"role": "user", "content": "hi"},
                                               {"role": "assistant", "content": "[1, 2, 3]"}])
    assert template.decode([i for i, m in zip(ids, mask, strict=True) if m]).startswith(THINK[flavour(template)] + "[1, 2, 3]")


@pytest.mark.parametrize(("messages", "why"), [
    ([{"role": "user", "content": "hi"}], "no assistant message"),
    ([{"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}], "starts with an assistant"),
    ([{"content": "no role"}], "not a chat message"),
])
def test_conversations_that_teach_nothing_are_refused_with_the_reason(template, messages, why):
    with pytest.raises(RenderError, match=why):
        render_conversation(template, messages)


def test_messages_after_the_last_assistant_message_are_left_out(template):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    longer = [*messages, {"role": "user", "content": "and then?"}]
    assert render_conversation(template, longer) == render_conversation(template, messages)


def test_tool_call_arguments_as_a_json_string_or_an_object_render_alike(template):
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": {"path": "notes.txt"}}}
    as_string = json.loads(json.dumps(call))
    as_string["function"]["arguments"] = json.dumps({"path": "notes.txt"})
    base = [{"role": "user", "content": "read it"}]
    assert (render_conversation(template, [*base, {"role": "assistant", "content": "", "tool_calls": [call]}],
                                tools=TOOLS)
            == render_conversation(template, [*base, {"role": "assistant", "content": "", "tool_calls": [as_string]}],
                                   tools=TOOLS))
