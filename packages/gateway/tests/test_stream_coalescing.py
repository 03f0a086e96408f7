"""Engine chunks that queued up while the gateway was behind go to the agent as one event: fewer events, the same
text, reasoning, tool calls and per-token logprobs, and the same recorded turn (ids and logprobs), in every dialect.

The engine is FakeEngineForTests: ``burst`` sends every token's event and ``[DONE]`` in one write, so the gateway
finds them all queued at once (as it does when it falls behind a fast engine); ``token_delay_s`` sends them one at
a time, the gateway keeping up, each its own event. Nothing else differs between the two runs.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from fake_engine import Scripted, gateway_over_fake

from tackroom_gateway.engine_client import EngineChunk
from tackroom_gateway.streaming import CANCELLED, END, queued_behind

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
QUESTION = "Weather in Nice?"


def chat_events(events: list[tuple[str | None, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"text": "", "reasoning": "", "tools": [], "logprobs": [], "deltas": 0}
    for _, data in events:
        for choice in data.get("choices") or []:
            delta = choice["delta"]
            out["text"] += delta.get("content") or ""
            out["reasoning"] += delta.get("reasoning_content") or ""
            out["tools"] += [(t["function"]["name"], json.loads(t["function"]["arguments"]))
                             for t in delta.get("tool_calls") or []]
            out["logprobs"] += [(e["token"], e["logprob"]) for e in (choice.get("logprobs") or {}).get("content") or []]
            out["deltas"] += bool(delta.get("content") or delta.get("reasoning_content"))
    return out


def responses_events(events: list[tuple[str | None, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"text": "", "reasoning": "", "tools": [], "deltas": 0}
    for name, data in events:
        if name == "response.output_text.delta":
            out["text"] += data["delta"]
        elif name == "response.reasoning_text.delta":
            out["reasoning"] += data["delta"]
        elif name == "response.output_item.done" and data["item"]["type"] == "function_call":
            out["tools"].append((data["item"]["name"], json.loads(data["item"]["arguments"])))
        out["deltas"] += name in ("response.output_text.delta", "response.reasoning_text.delta")
    assert events[-1][0] == "response.completed"
    return out


def messages_events(events: list[tuple[str | None, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"text": "", "reasoning": "", "tools": [], "deltas": 0}
    tool: list[Any] | None = None
    for name, data in events:
        if name == "content_block_start" and data["content_block"]["type"] == "tool_use":
            tool = [data["content_block"]["name"], ""]
        elif name == "content_block_delta":
            delta = data["delta"]
            if delta["type"] == "text_delta":
                out["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                out["reasoning"] += delta["thinking"]
            elif delta["type"] == "input_json_delta" and tool is not None:
                tool[1] += delta["partial_json"]
            out["deltas"] += delta["type"] in ("text_delta", "thinking_delta")
        elif name == "content_block_stop" and tool is not None:
            out["tools"].append((tool[0], json.loads(tool[1])))
            tool = None
    assert events[-1][0] == "message_stop"
    return out


def gemini_events(events: list[tuple[str | None, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"text": "", "reasoning": "", "tools": [], "deltas": 0}
    for _, data in events:
        for part in data["candidates"][0]["content"]["parts"]:
            if "functionCall" in part:
                out["tools"].append((part["functionCall"]["name"], part["functionCall"]["args"]))
            elif part.get("thought"):
                out["reasoning"] += part["text"]
            else:
                out["text"] += part["text"]
            out["deltas"] += "text" in part
    assert data["candidates"][0]["finishReason"] == "STOP"
    return out


DIALECTS: dict[str, tuple[str, dict[str, Any], Any]] = {
    "chat": ("/chat/completions", {
        "messages": [{"role": "user", "content": QUESTION}], "stream": True, "logprobs": True,
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]}, chat_events),
    "responses": ("/responses", {
        "model": "m", "input": QUESTION, "stream": True,
        "tools": [{"type": "function", "name": "get_weather", "parameters": WEATHER}]}, responses_events),
    "messages": ("/messages", {
        "model": "m", "max_tokens": 512, "messages": [{"role": "user", "content": QUESTION}], "stream": True,
        "tools": [{"name": "get_weather", "input_schema": WEATHER}]}, messages_events),
    "gemini": ("/models/m:streamGenerateContent?alt=sse", {
        "contents": [{"role": "user", "parts": [{"text": QUESTION}]}],
        "tools": [{"functionDeclarations": [{"name": "get_weather", "parameters": WEATHER}]}]}, gemini_events),
}


async def stream(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """The server-sent events of one streamed answer, as (event name, data); chat's ``[DONE]`` left out."""
    events: list[tuple[str | None, Any]] = []
    name = None
    async with client.stream("POST", url, json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                if line[6:] != "[DONE]":
                    events.append((name, json.loads(line[6:])))
                name = None
    return events


def answer_ids(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]


async def burst_and_trickle(tok, dialect: str, text: str) -> tuple[dict, dict, Any, Any, int]:
    """The same answer streamed in ``dialect`` twice: its events all at once, then one by one."""
    path, body, read = DIALECTS[dialect]
    ids = answer_ids(tok, text)
    async with gateway_over_fake(tok) as (fake, gw), httpx.AsyncClient(timeout=30) as c:
        fake.push(Scripted(completion_ids=ids, burst=True), Scripted(completion_ids=ids, token_delay_s=0.002))
        burst = read(await stream(c, gw.session_base_url("burst") + path, body))
        trickle = read(await stream(c, gw.session_base_url("trickle") + path, body))
        return burst, trickle, gw.trajectory("burst"), gw.trajectory("trickle"), len(ids)


ANSWER = "Let me look that up for you, it only takes a moment. " * 3 + \
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Nice"}}\n</tool_call>'
THINKING = "<think>\nThe user wants the weather in Nice, so I call the tool with the city.\n</think>\n\n" + ANSWER


@pytest.mark.parametrize("dialect", list(DIALECTS))
async def test_chunks_queued_behind_each_other_go_out_as_one_event(qwen3_tokenizer, dialect):
    burst, trickle, burst_turn, trickle_turn, tokens = await burst_and_trickle(qwen3_tokenizer, dialect, THINKING)
    assert trickle["deltas"] > 2 * burst["deltas"], trickle  # kept up: an event per token, or nearly
    assert burst["deltas"] <= 4, burst  # behind: the queued tokens in one event (reasoning, text)
    assert burst_turn.token_ids == trickle_turn.token_ids and burst_turn.logprobs == trickle_turn.logprobs
    assert len(burst_turn.turns[0].completion_ids) == tokens


@pytest.mark.parametrize("dialect", list(DIALECTS))
async def test_nothing_is_lost_when_chunks_are_taken_together(qwen3_tokenizer, smollm2_tokenizer, dialect):
    """What the agent reads adds up to the same answer, streamed at once or token by token (reasoning, text, tool
    calls, the per-token logprobs chat asks for), and the turn records the same ids and logprobs."""
    for tok, text in ((qwen3_tokenizer, THINKING), (smollm2_tokenizer, ANSWER),
                      (smollm2_tokenizer, "Sunny, 24 C.\n\nAnything else? <tool_call is not a call")):
        burst, trickle, burst_turn, trickle_turn, tokens = await burst_and_trickle(tok, dialect, text)
        del burst["deltas"], trickle["deltas"]
        assert burst == trickle
        assert burst["text"] and (burst["tools"] == [("get_weather", {"city": "Nice"})]) == ("<tool_call>\n" in text)
        if dialect == "chat":
            assert len(burst["logprobs"]) == tokens  # one entry per token, each the engine's own
        assert burst_turn.token_ids == trickle_turn.token_ids and burst_turn.logprobs == trickle_turn.logprobs
        assert burst_turn.turns[0].completion_ids == trickle_turn.turns[0].completion_ids == answer_ids(tok, text)


async def test_what_ends_the_stream_is_kept_for_after_the_chunks_before_it():
    """The queue as the engine stream fills it: the chunks before an end, a cancel or an error go out together,
    and that item comes after them, never lost or taken early."""
    def chunk(k: int) -> EngineChunk:
        return EngineChunk(text=str(k), token_ids=[k], logprobs=[-k / 10])

    for last in (END, CANCELLED, RuntimeError("engine failed")):
        queue: asyncio.Queue[Any] = asyncio.Queue()
        for k in range(1, 5):
            queue.put_nowait(chunk(k))
        queue.put_nowait(last)
        queue.put_nowait(chunk(9))  # nothing is ever queued after the end; it must stay where it is anyway
        pieces, after = queued_behind(chunk(0), queue)
        assert [p.token_ids for p in pieces] == [[0], [1], [2], [3], [4]] and after is last
        assert queue.qsize() == 1
    pieces, after = queued_behind(chunk(0), asyncio.Queue())
    assert [p.token_ids for p in pieces] == [[0]] and after is None
