"""The OpenAI Responses dialect (``POST /v1/responses``), driven by the openai SDK's own ``client.responses``
(plain, ``stream=True`` and the ``responses.stream()`` helper) and by the request Codex sends.

The engine is FakeEngineForTests (exact, chosen completion ids; failures on demand); the last test runs the
same conversation against the real local engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import httpx
import openai
import pytest
from fake_engine import FakeEngineForTests, Scripted, gateway_over_fake, serve_app
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tackroom_gateway import ChatTemplate, EngineSettings, GatewaySettings, PolicyGateway, build_gateway

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": False,
    }
]
INSTRUCTIONS = "You are a weather bot."


def ids(tok, text: str, eot: bool = True) -> list[int]:
    out = tok.encode(text, add_special_tokens=False)
    return out + [tok.convert_tokens_to_ids("<|im_end|>")] if eot else out


def call_text(*calls: tuple[str, dict]) -> str:
    return "".join(f'<tool_call>\n{{"name": "{n}", "arguments": {json.dumps(a)}}}\n</tool_call>\n' for n, a in calls)


OPENED: list = []
"""The vendor clients a test made: closed after it (left to the garbage collector, their HTTP pools close on a loop
that has ended, and the error lands in whatever test runs next on the worker)."""


def opened(client):
    OPENED.append(client)
    return client


@pytest.fixture(autouse=True)
async def _close_the_clients():
    yield
    while OPENED:
        client = OPENED.pop()
        await client.close()


def client(gw: PolicyGateway, sid: str) -> openai.AsyncOpenAI:
    return opened(openai.AsyncOpenAI(base_url=gw.session_base_url(sid), api_key="unused", max_retries=0))


def sent_back(output) -> list[dict]:
    """Output items as a client sends them back in its next ``input``."""
    return [item.model_dump(exclude_none=True) for item in output]


STREAM_EVENT = TypeAdapter(ResponseStreamEvent)


def sdk_shapes(events: list[dict]) -> None:
    """Each event validates against the SDK's own pydantic types (the client only constructs them, unchecked)."""
    for event in events:
        STREAM_EVENT.validate_python(event)
        if "response" in event:
            Response.model_validate(event["response"])


def one_branch(traj) -> None:
    assert [t.branch for t in traj.turns] == [0] * len(traj.turns) and traj.notes == []
    for prev, cur in zip(traj.turns, traj.turns[1:]):
        assert cur.prompt_ids[: len(prev.prompt_ids) + len(prev.completion_ids)] == prev.prompt_ids + prev.completion_ids


async def test_tool_calls_round_trip_on_one_branch_plain_streamed_and_helper(smollm2_tokenizer):
    tok = smollm2_tokenizer
    scripted = [
        ids(tok, "Checking.\n" + call_text(("get_weather", {"city": "Lyon"}))),
        ids(tok, call_text(("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"}))),
        ids(tok, "Lyon and Rome are sunny; Paris rains."),
    ]
    async with gateway_over_fake(tok) as (fake, gw):
        fake.push(*(Scripted(completion_ids=s) for s in scripted))
        c = client(gw, "trial")
        history: list[dict] = [{"role": "user", "content": "Weather in Lyon?"}]
        r1 = await c.responses.create(model="m", instructions=INSTRUCTIONS, input=history, tools=TOOLS)
        history += sent_back(r1.output)
        history.append({"type": "function_call_output", "call_id": r1.output[1].call_id, "output": "sunny"})
        history.append({"role": "user", "content": [{"type": "input_text", "text": "And Paris, Rome?"}]})
        events = [e async for e in await c.responses.create(model="m", instructions=INSTRUCTIONS, input=history,
                                                             tools=TOOLS, stream=True)]
        r2 = events[-1].response
        history += sent_back(r2.output)
        history += [{"type": "function_call_output", "call_id": item.call_id, "output": f"{item.arguments} rain"}
                    for item in r2.output]
        async with c.responses.stream(model="m", instructions=INSTRUCTIONS, input=history, tools=TOOLS) as stream:
            deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            r3 = await stream.get_final_response()
        traj = gw.trajectory("trial")

    assert r1.object == "response" and r1.status == "completed" and r1.id.startswith("resp_")
    assert [o.type for o in r1.output] == ["message", "function_call"] and r1.output_text == "Checking."
    call = r1.output[1]
    assert call.id.startswith("fc_") and call.name == "get_weather" and json.loads(call.arguments) == {"city": "Lyon"}
    assert r1.usage.input_tokens == len(traj.turns[0].prompt_ids) and r1.usage.output_tokens == len(scripted[0])
    assert r1.usage.total_tokens == r1.usage.input_tokens + r1.usage.output_tokens
    # streamed: the event sequence of OpenAI's API, numbered; parallel calls are one assistant message
    kinds = [e.type for e in events]
    sdk_shapes([e.to_dict() for e in events])
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds.count("response.function_call_arguments.done") == 2 and "response.output_text.delta" not in kinds
    assert [json.loads(o.arguments)["city"] for o in r2.output] == ["Paris", "Rome"]
    assert r3.output_text == "".join(deltas) == "Lyon and Rome are sunny; Paris rains."
    # the token trajectory: three turns on one branch, each prompt extending the last turn's exact ids
    assert [t.completion_ids for t in traj.turns] == scripted
    one_branch(traj)
    assert [m["role"] for m in traj.messages] == ["system", "user", "assistant", "tool", "user", "assistant",
                                                  "tool", "tool", "assistant"]
    assert len(traj.messages[5]["tool_calls"]) == 2
    assert "Paris" in tok.decode(traj.turns[2].prompt_ids[len(traj.turns[1].prompt_ids):])


async def test_previous_response_id_continues_the_kept_conversation(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw):
        fake.push(Scripted(completion_ids=ids(tok, call_text(("get_weather", {"city": "Oslo"})))),
                  Scripted(completion_ids=ids(tok, "Cold in Oslo.")), Scripted(completion_ids=ids(tok, "Bring a coat.")),
                  Scripted(completion_ids=ids(tok, "Hi.")))
        c = client(gw, "chain")
        r1 = await c.responses.create(model="m", instructions=INSTRUCTIONS, input="Oslo?", tools=TOOLS)
        r2 = await c.responses.create(model="m", instructions=INSTRUCTIONS, previous_response_id=r1.id, tools=TOOLS,
                                      input=[{"type": "function_call_output", "call_id": r1.output[0].call_id,
                                              "output": "-5 C"}])
        r3 = await c.responses.create(model="m", instructions=INSTRUCTIONS, previous_response_id=r2.id, tools=TOOLS,
                                      input="Coat?", store=False)
        traj = gw.trajectory("chain")
        with pytest.raises(openai.BadRequestError) as unknown:
            await c.responses.create(model="m", previous_response_id="resp_nope", input="hi")
        with pytest.raises(openai.BadRequestError) as unstored:  # store=False: not kept, as with OpenAI
            await c.responses.create(model="m", previous_response_id=r3.id, input="hi")
        other = client(gw, "another-trial")  # a response is kept in its own session only
        with pytest.raises(openai.BadRequestError):
            await other.responses.create(model="m", previous_response_id=r1.id, input="hi")
    assert r2.previous_response_id == r1.id and r3.output_text == "Bring a coat." and r3.store is False
    assert len(traj.turns) == 3
    one_branch(traj)
    assert unknown.value.status_code == 400 and unknown.value.code == "previous_response_not_found"
    assert unknown.value.param == "previous_response_id" and "resp_nope" in unknown.value.message
    assert unstored.value.code == "previous_response_not_found"


async def test_reasoning_is_an_output_item_and_comes_back_as_reasoning_content(qwen3_tokenizer):
    tok = qwen3_tokenizer
    eot = [tok.convert_tokens_to_ids("<|im_end|>")]
    first = tok.encode("<think>\nI need the tool.\n</think>\n\n" + call_text(("get_weather", {"city": "Nice"})).strip(),
                       add_special_tokens=False) + eot
    second = tok.encode("<think>\nIt is warm.\n</think>\n\nWarm in Nice.", add_special_tokens=False) + eot
    async with gateway_over_fake(tok) as (fake, gw):
        fake.push(Scripted(completion_ids=first), Scripted(completion_ids=second))
        c = client(gw, "think")
        r1 = await c.responses.create(model="m", input="Nice?", tools=TOOLS)
        history = [{"role": "user", "content": "Nice?"}, *sent_back(r1.output),
                   {"type": "function_call_output", "call_id": r1.output[1].call_id, "output": "25 C"}]
        events = [e async for e in await c.responses.create(model="m", input=history, tools=TOOLS, stream=True)]
        traj = gw.trajectory("think")
    assert [o.type for o in r1.output] == ["reasoning", "function_call"]
    assert r1.output[0].content[0].text == "I need the tool." and r1.output[0].summary == []
    kinds = [e.type for e in events]
    sdk_shapes([e.to_dict() for e in events])
    assert kinds.index("response.reasoning_text.delta") < kinds.index("response.output_text.delta")
    final = events[-1].response
    assert [o.type for o in final.output] == ["reasoning", "message"] and final.output_text == "Warm in Nice."
    assert final.output[0].content[0].text.strip() == "It is warm."
    assert traj.messages[1]["reasoning_content"] == "I need the tool."
    one_branch(traj)


async def test_codex_shaped_requests_stream_and_continue_one_branch(smollm2_tokenizer):
    """The body codex-rs builds (client_common.rs / codex-api ResponsesApiRequest): instructions, developer and
    user messages, a reasoning item carrying only encrypted_content, store false, include, prompt_cache_key; its
    SSE parser reads ``response.output_item.done`` items and ``response.completed``'s id and usage."""
    tok = smollm2_tokenizer
    shell = {"type": "function", "name": "shell", "description": "Runs a shell command", "strict": False,
             "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}},
                            "required": ["command"], "additionalProperties": False}}
    scripted = [ids(tok, call_text(("shell", {"command": ["ls"]}))), ids(tok, "There are two files.")]
    body = {
        "model": "smollm2", "instructions": "You are Codex.", "tools": [shell], "tool_choice": "auto",
        "parallel_tool_calls": False, "reasoning": {"effort": "medium", "summary": "auto"}, "store": False,
        "stream": True, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "conv-1",
        "text": {"verbosity": "medium"}, "client_metadata": {"session_id": "s-1", "turn_id": "t-1"},
        "input": [
            {"type": "message", "id": "msg_1", "role": "developer",
             "content": [{"type": "input_text", "text": "sandbox: none"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<env>cwd=/w</env>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
        ],
    }

    async def run(c: httpx.AsyncClient, url: str) -> list[tuple[str, dict]]:
        out, name = [], None
        async with c.stream("POST", url, json=body) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            async for line in r.aiter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    out.append((name, json.loads(line[6:])))
        return out

    async with gateway_over_fake(tok) as (fake, gw), httpx.AsyncClient(timeout=30) as c:
        fake.push(*(Scripted(completion_ids=s) for s in scripted))
        url = gw.session_base_url("codex") + "/responses"
        first = await run(c, url)
        done = [d["item"] for _, d in first if d["type"] == "response.output_item.done"]
        # Codex keeps the done items (it drops their ids) and sends them back with the call's output
        body["input"] = [*body["input"], {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA..."},
                         *({k: v for k, v in item.items() if k != "id"} for item in done),
                         {"type": "function_call_output", "call_id": done[0]["call_id"], "output": "a.txt\nb.txt"}]
        second = await run(c, url)
        traj = gw.trajectory("codex")
    assert all(name == data["type"] for name, data in first + second)
    sdk_shapes([data for _, data in first + second])
    completed = second[-1][1]
    assert completed["type"] == "response.completed" and completed["response"]["id"].startswith("resp_")
    assert set(completed["response"]["usage"]) >= {"input_tokens", "output_tokens", "total_tokens"}
    assert done[0]["type"] == "function_call" and done[0]["name"] == "shell"
    assert [t.completion_ids for t in traj.turns] == scripted
    one_branch(traj)
    roles = [m["role"] for m in traj.messages]
    assert roles == ["system", "system", "user", "user", "assistant", "tool", "assistant"]


async def test_refusals_are_responses_errors(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw), httpx.AsyncClient(timeout=30) as h:
        c = client(gw, "bad")
        url = gw.session_base_url("bad") + "/responses"
        not_json = await h.post(url, content=b"{nope")
        wrong = await h.post(url, json={"input": 7})
        with pytest.raises(openai.BadRequestError) as image:
            await c.responses.create(model="m", input=[{"role": "user", "content": [
                {"type": "input_text", "text": "what is this?"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}])
        with pytest.raises(openai.BadRequestError) as search:
            await c.responses.create(model="m", input="news?", tools=[{"type": "web_search"}])
        with pytest.raises(openai.BadRequestError) as freeform:
            await c.responses.create(model="m", input="patch", tools=[
                {"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark",
                                                                      "definition": "start: /.+/"}}])
        with pytest.raises(openai.BadRequestError) as namespace:  # Codex 0.171.0's sub-agent tools, by default
            await c.responses.create(model="m", input="go", tools=[
                {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents", "tools": []}])
        with pytest.raises(openai.BadRequestError) as custom_item:
            await c.responses.create(model="m", input=[
                {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch"}])
        unknown_param = await h.post(url, json={"input": "hi", "background": True})
    assert not_json.status_code == 400 and not_json.json()["error"]["type"] == "invalid_request_error"
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "input"
    assert image.value.status_code == 400 and image.value.type == "invalid_request_error"
    assert "input_image" in image.value.message and image.value.param == "input[0].content[1]"
    assert search.value.code == "unsupported_tool_type" and "'web_search'" in search.value.message
    assert 'web_search = "disabled"' in search.value.message
    assert "[agents] enabled = false" in namespace.value.message and "'multi_agent_v1'" in namespace.value.message
    assert "'apply_patch'" in freeform.value.message and "leave it out" in freeform.value.message
    assert "custom_tool_call" in custom_item.value.message and "freeform custom tool" in custom_item.value.message
    assert unknown_param.status_code == 400 and "background" in unknown_param.json()["error"]["message"]
    assert fake.requests == [] and gw.trajectory("bad").turns == []  # nothing reached the engine


async def test_engine_failures_before_and_during_output(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw):
        c = client(gw, "faults")
        fake.push(Scripted(completion_ids=ids(tok, "one two three four five six"), die_after_tokens=3),
                  Scripted(completion_ids=ids(tok, "a long answer that stops"), finish_reason="length"))
        events = [e async for e in await c.responses.create(model="m", input="count", stream=True)]
        cut = await c.responses.create(model="m", input="again", max_output_tokens=6)
        gw.engine.base_url = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
        with pytest.raises(openai.APIStatusError) as down:
            await c.responses.create(model="m", input="hi")
        with pytest.raises(openai.APIStatusError) as down_streamed:
            await c.responses.create(model="m", input="hi", stream=True)
    kinds = [e.type for e in events]
    assert "response.output_text.delta" in kinds and kinds[-2:] == ["error", "response.failed"]
    sdk_shapes([e.to_dict() for e in events])
    # the gateway's code in the error event; one of OpenAI's in the failed response (Codex retries server_error)
    assert events[-2].code == "engine_unavailable" and "engine" in events[-1].response.error.message
    assert events[-1].response.status == "failed" and events[-1].response.error.code == "server_error"
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert cut.output[0].status == "incomplete"
    Response.model_validate(cut.to_dict())
    assert fake.requests[-1]["max_tokens"] == 6
    assert down.value.status_code == down_streamed.value.status_code == 503
    assert down.value.code == "engine_unavailable"


def _slowed(app, pause_s: float):
    """``app`` with a pause before each piece of a streamed body: an engine still generating when a client leaves."""

    async def slowed(scope, receive, send):
        async def slow_send(message):
            if message["type"] == "http.response.body" and message.get("more_body"):
                await asyncio.sleep(pause_s)
            await send(message)

        await app(scope, receive, slow_send)

    return slowed


async def test_a_client_gone_mid_stream_abandons_the_engine_request(smollm2_tokenizer):
    tok = smollm2_tokenizer
    fake = FakeEngineForTests(tok)
    fake.push(Scripted(completion_ids=ids(tok, "word " * 60)))
    async with serve_app(_slowed(fake.app, 0.05)) as url:
        gw = PolicyGateway(GatewaySettings(engine=EngineSettings(base_url=url, backoff_s=0.01)),
                           template=ChatTemplate(tok))
        await gw.start()
        try:
            c = client(gw, "gone")
            stream = await c.responses.create(model="m", input="talk", stream=True)
            async for event in stream:
                if event.type == "response.output_text.delta":
                    break
            await stream.close()
            session = gw.sessions["gone"]
            for _ in range(200):
                if not session.inflight:
                    break
                await asyncio.sleep(0.01)
            traj = gw.trajectory("gone")
            open_requests = len(session.inflight)
        finally:
            with contextlib.suppress(Exception):
                await gw.stop()
    assert open_requests == 0 and traj.turns == []
    assert any("closed its connection mid-stream" in n for n in traj.notes), traj.notes


@pytest.mark.engine
async def test_real_engine_tool_conversation_on_one_branch(engine_url):
    async with build_gateway(engine_url, tokenizer="smollm2") as gw:
        c = client(gw, "real")
        history: list[dict] = [{"role": "user", "content": "What is the weather in Paris?"}]
        r1 = await c.responses.create(model="m", instructions=INSTRUCTIONS, input=history, tools=TOOLS,
                                      tool_choice={"type": "function", "name": "get_weather"},
                                      max_output_tokens=48, temperature=0)
        history += sent_back(r1.output)
        calls = [o for o in r1.output if o.type == "function_call"]
        history += [{"type": "function_call_output", "call_id": o.call_id, "output": "Sunny, 22 C"} for o in calls]
        async with c.responses.stream(model="m", instructions=INSTRUCTIONS, input=history, tools=TOOLS,
                                      max_output_tokens=32, temperature=0) as stream:
            r2 = await stream.get_final_response()
        history += [*sent_back(r2.output), {"role": "user", "content": "Umbrella?"}]
        r3 = await c.responses.create(model="m", instructions=INSTRUCTIONS, input=history, tools=TOOLS,
                                      max_output_tokens=24, temperature=0)
        traj = gw.trajectory("real")
    assert calls and calls[0].name == "get_weather" and "city" in json.loads(calls[0].arguments)
    assert r3.status in ("completed", "incomplete") and len(traj.turns) == 3
    one_branch(traj)
    assert r2.usage.input_tokens == len(traj.turns[1].prompt_ids)
