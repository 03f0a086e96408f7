"""The Gemini dialect, driven by Google's own client (google-genai): generateContent, streamGenerateContent?alt=sse
and countTokens in a session, tool calls round-tripping on one token branch, Google-shaped errors.

The engine is FakeEngineForTests (exact, chosen completion ids; failures on demand; see its docstring) except in
the last test, which runs the same conversation against the real local vLLM (marked ``engine``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from fake_engine import Scripted, gateway_over_fake, serve_app
from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tackroom import InfraError
from tackroom_gateway import ChatTemplate, EngineSettings, GatewaySettings, PolicyGateway, build_gateway

WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="Get the current weather for a city",
    parameters=types.Schema(type="OBJECT", properties={"city": types.Schema(type="STRING")}, required=["city"]),
)
CONFIG = types.GenerateContentConfig(
    tools=[types.Tool(function_declarations=[WEATHER])],
    system_instruction="You are terse.",
    temperature=0,
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
)
CALL_TEXT = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n</tool_call>'


def ids(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]


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
        await client.aio.aclose()
        client.close()


def client_for(gw, sid: str, api_version: str = "v1beta") -> genai.Client:
    """google-genai pointed at a session's root (``.../sessions/{id}/{token}``), as GOOGLE_GEMINI_BASE_URL is."""
    root = gw.session_base_url(sid).removesuffix("/v1")
    return opened(genai.Client(api_key="any-key", http_options=types.HttpOptions(base_url=root, api_version=api_version)))


def check_one_branch(traj) -> None:
    assert traj.notes == [] and all(t.branch == 0 for t in traj.turns)
    for prev, cur in zip(traj.turns, traj.turns[1:]):
        assert cur.prompt_ids[: len(prev.prompt_ids) + len(prev.completion_ids)] == prev.prompt_ids + prev.completion_ids


async def streamed(client: genai.Client, contents, config) -> tuple[list[types.GenerateContentResponse], types.Content]:
    """The stream's chunks and the model turn they add up to (text parts joined, as the Gemini CLI keeps it)."""
    chunks = [c async for c in await client.aio.models.generate_content_stream(
        model="gemini-2.5-flash", contents=contents, config=config)]
    text = "".join(p.text for c in chunks for p in (c.candidates[0].content.parts or []) if p.text and not p.thought)
    calls = [p for c in chunks for p in (c.candidates[0].content.parts or []) if p.function_call]
    parts = ([types.Part(text=text)] if text else []) + calls
    return chunks, types.Content(role="model", parts=parts)


async def test_tool_calls_round_trip_on_one_branch(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw):
        client = client_for(gw, "trial")
        fake.push(Scripted(completion_ids=ids(tok, CALL_TEXT)), Scripted(completion_ids=ids(tok, "It is sunny in Lyon.")),
                  Scripted(completion_ids=ids(tok, "No umbrella.")))
        history = [types.Content(role="user", parts=[types.Part(text="Weather in Lyon?")])]
        first = await client.aio.models.generate_content(model="gemini-2.5-flash", contents=history, config=CONFIG)
        cand = first.candidates[0]
        assert cand.finish_reason == types.FinishReason.STOP and first.text == "Checking."
        (call,) = first.function_calls
        assert call.name == "get_weather" and call.args == {"city": "Lyon"} and call.id
        # the client answers the call by name only (no id), as Part.from_function_response does
        history += [cand.content, types.Content(role="user", parts=[
            types.Part.from_function_response(name="get_weather", response={"output": "Sunny, 22 C"})])]
        chunks, reply = await streamed(client, history, CONFIG)
        assert reply.parts[0].text == "It is sunny in Lyon."
        assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
        history += [reply, types.Content(role="user", parts=[types.Part(text="Umbrella?")])]
        third = await client.aio.models.generate_content(model="gemini-2.5-flash", contents=history, config=CONFIG)
        traj = gw.trajectory("trial")
        sent = [tok.decode(r["prompt"]) for r in fake.requests]
    assert third.text == "No umbrella." and len(traj.turns) == 3
    check_one_branch(traj)
    t0, t1, t2 = traj.turns
    assert first.usage_metadata.prompt_token_count == len(t0.prompt_ids)
    assert first.usage_metadata.candidates_token_count == len(t0.completion_ids)
    assert chunks[-1].usage_metadata.total_token_count == len(t1.prompt_ids) + len(t1.completion_ids)
    # what the model read: the system instruction, the tools with JSON Schema's lower-case types, the tool output
    assert sent[0].startswith("<|im_start|>system\nYou are terse.") and '"type": "object"' in sent[0]
    assert '"OBJECT"' not in sent[0]
    assert sent[1].endswith("<|im_start|>user\n<tool_response>\nSunny, 22 C\n</tool_response><|im_end|>\n"
                            "<|im_start|>assistant\n")
    assert traj.token_ids == t2.prompt_ids + t2.completion_ids
    assert sum(traj.loss_mask) == sum(len(t.completion_ids) for t in traj.turns)


async def test_streamed_and_plain_answers_agree(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw):
        fake.push(Scripted(completion_ids=ids(tok, CALL_TEXT)), Scripted(completion_ids=ids(tok, CALL_TEXT)))
        plain = await client_for(gw, "a").aio.models.generate_content(
            model="gemini-2.5-flash", contents="Weather in Lyon?", config=CONFIG)
        chunks, reply = await streamed(client_for(gw, "b"), "Weather in Lyon?", CONFIG)
        ta, tb = gw.trajectory("a"), gw.trajectory("b")
    # streamed text is sent as it comes, so it keeps the newline before the call (the key strips it, as for chat)
    assert [p.text.strip() for p in reply.parts if p.text] == [plain.text] == ["Checking."]
    assert [p.function_call.args for p in reply.parts if p.function_call] == [c.args for c in plain.function_calls]
    # the calls come in one chunk, the finish reason and usage in the last one
    assert sum(1 for c in chunks for p in c.candidates[0].content.parts or [] if p.function_call) == 1
    assert [c.candidates[0].finish_reason for c in chunks].count(types.FinishReason.STOP) == 1
    assert chunks[-1].usage_metadata.candidates_token_count == plain.usage_metadata.candidates_token_count
    assert ta.token_ids == tb.token_ids and ta.loss_mask == tb.loss_mask and ta.logprobs == tb.logprobs


async def test_ids_match_calls_to_responses_and_thoughts_round_trip(qwen3_tokenizer):
    """Two calls in one turn, answered out of order by id (the Gemini CLI sends ids back, prefixed with the tool's
    name); the model's thought part comes back in the history; the conversation stays on one branch."""
    tok = qwen3_tokenizer
    two_calls = ('<think>\nTwo cities.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon"}}'
                 '\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')
    async with gateway_over_fake(tok) as (fake, gw):
        client = client_for(gw, "q")
        fake.push(Scripted(completion_ids=ids(tok, two_calls)), Scripted(completion_ids=ids(tok, "Lyon is warmer.")))
        history = [types.Content(role="user", parts=[types.Part(text="Lyon or Oslo?")])]
        first = await client.aio.models.generate_content(model="gemini-2.5-pro", contents=history, config=CONFIG)
        parts = first.candidates[0].content.parts
        assert parts[0].thought and parts[0].text == "Two cities."
        lyon, oslo = (p.function_call for p in parts[1:])
        for call in (lyon, oslo):
            call.id = f"get_weather__{call.id}"
        answers = [types.Part(function_response=types.FunctionResponse(id=c.id, name=c.name, response={"output": out}))
                   for c, out in ((oslo, "Oslo: 3 C"), (lyon, "Lyon: 22 C"))]
        history += [first.candidates[0].content, types.Content(role="user", parts=answers)]
        second = await client.aio.models.generate_content(model="gemini-2.5-pro", contents=history, config=CONFIG)
        traj = gw.trajectory("q")
        sent = tok.decode(fake.requests[1]["prompt"])
    assert second.text == "Lyon is warmer."
    check_one_branch(traj)
    assert sent.index("Oslo: 3 C") < sent.index("Lyon: 22 C")


async def test_configs_reach_the_engine(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw):
        fake.default = lambda prompt: Scripted(completion_ids=ids(tok, CALL_TEXT))
        client = client_for(gw, "c", api_version="v1")
        forced = CONFIG.model_copy(update={"tool_config": types.ToolConfig(function_calling_config=types.FunctionCallingConfig(
            mode="ANY", allowed_function_names=["get_weather"])), "top_p": 0.5, "top_k": 7, "max_output_tokens": 33,
            "stop_sequences": ["END"], "seed": 4, "thinking_config": types.ThinkingConfig(thinking_budget=0)})
        await client.aio.models.generate_content(model="m", contents="Lyon?", config=forced)
        schema = types.Schema(type="OBJECT", properties={"n": types.Schema(type="INTEGER", nullable=True)})
        await client.aio.models.generate_content(model="m", contents="Count.", config=types.GenerateContentConfig(
            response_mime_type="application/json", response_schema=schema))
        none = CONFIG.model_copy(update={"tool_config": types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(mode="NONE"))})
        plain = await client.aio.models.generate_content(model="m", contents="Lyon?", config=none)
    tool_turn, json_turn, _ = fake.requests
    assert {k: tool_turn[k] for k in ("temperature", "top_p", "top_k", "max_tokens", "stop", "seed")} == {
        "temperature": 0.0, "top_p": 0.5, "top_k": 7, "max_tokens": 33, "stop": ["END"], "seed": 4}
    tag = json.loads(tool_turn["structured_outputs"]["structural_tag"])
    assert tag["format"]["elements"][1]["json_schema"]["properties"] == {"city": {"type": "string"}}
    assert json_turn["response_format"] == {"type": "json_schema", "json_schema": {"name": "response", "schema": {
        "type": "object", "properties": {"n": {"type": ["integer", "null"]}}}}}
    # mode NONE: the model's <tool_call> text is left as text, not parsed into a call
    assert plain.function_calls is None and "<tool_call>" in plain.text


async def test_count_tokens_counts_the_next_prompt_and_records_nothing(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw):
        client = client_for(gw, "n")
        fake.push(Scripted(completion_ids=ids(tok, "Hi there.")), Scripted(completion_ids=ids(tok, "Fine.")))
        history = [types.Content(role="user", parts=[types.Part(text="Hello")])]
        first = await client.aio.models.generate_content(model="m", contents=history)
        history += [first.candidates[0].content, types.Content(role="user", parts=[types.Part(text="How are you?")])]
        counted = await client.aio.models.count_tokens(model="m", contents=history)
        assert len(gw.trajectory("n").turns) == 1 and len(fake.requests) == 1
        await client.aio.models.generate_content(model="m", contents=history)
        traj = gw.trajectory("n")
    assert counted.total_tokens == len(traj.turns[1].prompt_ids) == len(fake.requests[1]["prompt"])
    check_one_branch(traj)


def google_error(err: genai_errors.APIError, code: int, status: str, words: str) -> None:
    assert err.code == code and err.status == status, err.details
    assert words in err.message, err.message


async def test_refusals_are_google_errors(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw):
        client = client_for(gw, "e")
        image = types.Part.from_bytes(data=b"\x89PNG fake", mime_type="image/png")
        cases = {
            "text-only model": dict(contents=[types.Content(role="user", parts=[types.Part(text="Look:"), image])]),
            "googleSearch": dict(contents="news?", config=types.GenerateContentConfig(
                tools=[types.Tool(google_search=types.GoogleSearch())])),
            "candidateCount must be 1": dict(contents="hi", config=types.GenerateContentConfig(candidate_count=2)),
            "cachedContent": dict(contents="hi", config=types.GenerateContentConfig(cached_content="cachedContents/x")),
            "answers TEXT only": dict(contents="hi", config=types.GenerateContentConfig(response_modalities=["IMAGE"])),
        }
        for words, kwargs in cases.items():
            with pytest.raises(genai_errors.ClientError) as caught:
                await client.aio.models.generate_content(model="m", **kwargs)
            google_error(caught.value, 400, "INVALID_ARGUMENT", words)
        root = gw.session_base_url("e").removesuffix("/v1")
        async with httpx.AsyncClient(base_url=root, timeout=30) as c:
            raw = {
                "not JSON": await c.post("/v1beta/models/m:generateContent", content=b"{nope"),
                "non-empty list": await c.post("/v1beta/models/m:generateContent", json={"contents": []}),
                "alt=sse": await c.post("/v1beta/models/m:streamGenerateContent", json={"contents": [
                    {"role": "user", "parts": [{"text": "hi"}]}]}),
                "unknown field(s) prompt": await c.post("/v1beta/models/m:generateContent", json={"prompt": "hi"}),
            }
            missing = await c.post("/v1beta/models/m:embedContent", json={})
        for words, r in raw.items():
            assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT", r.text
            assert words in r.json()["error"]["message"]
        assert missing.status_code == 404 and missing.json()["error"]["status"] == "NOT_FOUND"
        assert fake.requests == [] and gw.session_error("e") is None  # a client's mistake is not the trial's


async def test_engine_failures_are_google_errors_and_infra(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw):
        fake.push(Scripted(completion_ids=ids(tok, "one two three four five six"), die_after_tokens=3))
        with pytest.raises(genai_errors.ServerError) as mid:
            await streamed(client_for(gw, "mid"), "count", None)
        gw.engine.base_url = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
        start = time.monotonic()
        with pytest.raises(genai_errors.ServerError) as down:
            await client_for(gw, "down").aio.models.generate_content(model="m", contents="hi")
        took = time.monotonic() - start
    google_error(mid.value, 503, "UNAVAILABLE", "engine")
    google_error(down.value, 503, "UNAVAILABLE", "unavailable after 4 attempts")
    assert took < 10 and gw.trajectory("mid").turns == []
    assert isinstance(gw.session_error("mid"), InfraError) and isinstance(gw.session_error("down"), InfraError)


class SlowStreamEngineForTests:
    """An engine that streams one token every 50 ms and notes whether its client left before the end: the one
    behaviour FakeEngineForTests cannot order (it streams as fast as it can)."""

    def __init__(self, tok, n_tokens: int = 200) -> None:
        self.tok = tok
        self.ids = tok.encode(" word" * n_tokens, add_special_tokens=False)
        self.finished = False
        self.app = Starlette(routes=[Route("/v1/models", self.models, methods=["GET"]),
                                     Route("/v1/completions", self.completions, methods=["POST"])])

    async def models(self, request: Request) -> Response:
        return JSONResponse({"data": [{"id": "slow", "max_model_len": 4096}]})

    async def completions(self, request: Request) -> Response:
        async def events() -> AsyncIterator[bytes]:
            for tid in self.ids:
                choice = {"index": 0, "text": self.tok.decode([tid]), "token_ids": [tid], "finish_reason": None,
                          "logprobs": {"tokens": [self.tok.decode([tid])], "token_logprobs": [-0.5]}}
                yield b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"
                await asyncio.sleep(0.05)
            self.finished = True
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")


async def test_a_client_leaving_mid_stream_abandons_the_engine_request(smollm2_tokenizer):
    tok = smollm2_tokenizer
    engine = SlowStreamEngineForTests(tok)
    async with serve_app(engine.app) as url:
        gw = PolicyGateway(GatewaySettings(engine=EngineSettings(base_url=url)), template=ChatTemplate(tok))
        await gw.start()
        try:
            root = gw.session_base_url("s").removesuffix("/v1")
            body = {"contents": [{"role": "user", "parts": [{"text": "talk"}]}]}
            async with httpx.AsyncClient(timeout=30) as c, c.stream(
                    "POST", root + "/v1beta/models/m:streamGenerateContent?alt=sse", json=body) as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        assert json.loads(line[6:])["candidates"][0]["content"]["parts"][0]["text"]
                        break
            for _ in range(100):
                if any("cut off" in n for n in gw.trajectory("s").notes):
                    break
                await asyncio.sleep(0.05)
            traj = gw.trajectory("s")
        finally:
            await gw.stop()
    assert not engine.finished and traj.turns == []
    assert any("client closed its connection mid-stream" in n for n in traj.notes), traj.notes


@pytest.mark.engine
@pytest.mark.slow
async def test_a_tool_conversation_against_the_real_engine(engine_url):
    async with build_gateway(engine_url, tokenizer="smollm2") as gw:
        client = client_for(gw, "real")
        forced = CONFIG.model_copy(update={"max_output_tokens": 48, "tool_config": types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(mode="ANY", allowed_function_names=["get_weather"]))})
        history = [types.Content(role="user", parts=[types.Part(text="What is the weather in Paris right now?")])]
        first = await client.aio.models.generate_content(model="smollm2", contents=history, config=forced)
        (call,) = first.function_calls
        assert call.name == "get_weather" and "city" in call.args
        history += [first.candidates[0].content, types.Content(role="user", parts=[
            types.Part.from_function_response(name="get_weather", response={"output": "Sunny, 22 C"})])]
        chunks, reply = await streamed(client, history, CONFIG.model_copy(update={"max_output_tokens": 32}))
        history += [reply, types.Content(role="user", parts=[types.Part(text="Should I take an umbrella?")])]
        third = await client.aio.models.generate_content(model="smollm2", contents=history, config=CONFIG.model_copy(
            update={"max_output_tokens": 32}))
        traj = gw.trajectory("real")
    assert chunks[-1].candidates[0].finish_reason in (types.FinishReason.STOP, types.FinishReason.MAX_TOKENS)
    assert third.usage_metadata.prompt_token_count == len(traj.turns[2].prompt_ids)
    assert len(traj.turns) == 3
    check_one_branch(traj)
    assert all(lp <= 0.0 for lp in traj.logprobs) and any(lp < 0.0 for lp in traj.logprobs)
