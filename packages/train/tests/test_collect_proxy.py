"""The recording proxy: a harness that talks to a text-only teacher directly is recorded on the way (messages,
tools, the teacher's replies, streamed or not), and its demonstration is the one the gateway's record gives for
the same conversation. The teacher is the scripted teacher's chat route (text only, tool calls parsed)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import httpx
import pytest

from tackroom import Policy, Trajectory
from tackroom_gateway import EngineSettings, GatewaySettings, GatewayTrialSession, PolicyGateway
from tackroom_train.collect.conversion import TrialEpisode, convert_trial
from tackroom_train.collect.recording import calls_of_session
from tackroom_train.collect.recording_proxy import ChatRecorder, Exchange, calls_of_exchanges
from tackroom_train.collect.run import load_policy_side
from tackroom_train.collect.teacher import ScriptedTeacher, serve_teacher

TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "notes.txt"}}\n</tool_call>'
QUESTION = [{"role": "user", "content": "What is in notes.txt?"}]


@pytest.fixture(scope="module")
def policy():
    return load_policy_side("smollm2")


async def converse(base: str, *, stream: bool) -> list[dict]:
    """The question, the teacher's tool call, its result, the teacher's answer: as an OpenAI client does it."""
    messages = list(QUESTION)
    async with httpx.AsyncClient(timeout=30) as http:
        for _ in range(2):
            body = {"model": "teacher", "messages": messages, "tools": TOOLS, "stream": stream}
            answer = await http.post(f"{base}/chat/completions", json=body)
            assert answer.status_code == 200, answer.text
            messages.append(read_answer(answer, stream))
            for call in messages[-1].get("tool_calls") or []:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": "blue"})
    return messages


def read_answer(answer: httpx.Response, stream: bool) -> dict:
    if not stream:
        return answer.json()["choices"][0]["message"]
    message: dict = {"role": "assistant", "content": ""}
    for line in answer.text.splitlines():
        if line.startswith("data: {"):
            delta = json.loads(line[6:])["choices"][0]["delta"]
            message["content"] += delta.get("content") or ""
            if delta.get("tool_calls"):
                message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in delta["tool_calls"]]
    return message


@pytest.mark.parametrize("stream", [False, True])
async def test_a_direct_conversation_is_recorded_and_rerendered_like_the_gateways(policy, stream):
    script = [CALL, "blue"] * 2
    teacher = ScriptedTeacher(lambda prompt: script.pop(0), policy.template)
    async with serve_teacher(teacher) as url:
        plugins = SimpleNamespace(policy=Policy(base_url=url, model="teacher"))
        async with ChatRecorder(url, plugins).serving() as recorder:
            async with recorder(SimpleNamespace(id="trial-1")) as session:
                assert session.policy.base_url.startswith(recorder.base_url) and session.policy.model == "teacher"
                await converse(session.policy.base_url, stream=stream)
                assert await session.complete(Trajectory()) == Trajectory()
        calls = recorder.records["trial-1"]
        assert [(c.branch, c.parent, c.tools_known, c.tools) for c in calls] == [(0, None, True, TOOLS),
                                                                                  (0, 0, True, TOOLS)]
        assert calls[0].reply["tool_calls"][0]["function"]["name"] == "read_file" and calls[1].reply["content"] == "blue"

        settings = GatewaySettings(engine=EngineSettings(base_url=url, backoff_s=0.01, retries=0))
        async with PolicyGateway(settings, template=policy.template) as gateway:  # the same conversation, recorded
            await converse(gateway.session_base_url("s"), stream=stream)
            by_gateway = calls_of_session(GatewayTrialSession(gateway, "s", {}, None))

    def made(routing, record, same):
        return convert_trial(TrialEpisode(task_id="t", harness="h", reward=1.0, source="s", trajectory=Trajectory(),
                                          routing=routing, same_tokenizer=same, record=record), policy)

    direct, copied = made("direct", calls, False), made("gateway", by_gateway, True)
    assert direct.how == "rerendered" and copied.how == "recorded"
    assert [(d.input_ids, d.loss_mask) for d in direct.demonstrations] == [
        (d.input_ids, d.loss_mask) for d in copied.demonstrations]


async def test_the_proxy_passes_errors_on_and_refuses_other_sessions(policy):
    teacher = ScriptedTeacher(lambda prompt: 1 / 0, policy.template)
    async with serve_teacher(teacher) as url:
        async with ChatRecorder(url, SimpleNamespace(policy=Policy(base_url=url, model="teacher"))).serving() as rec:
            async with rec(SimpleNamespace(id="t")) as session, httpx.AsyncClient(timeout=30) as http:
                base = session.policy.base_url
                failed = await http.post(f"{base}/chat/completions", json={"messages": QUESTION})
                assert failed.status_code == 500 and "ZeroDivisionError" in failed.text
                models = await http.get(f"{base}/models")
                assert models.json()["data"][0]["id"] == "teacher"
                wrong = await http.get(base.replace(base.split("/")[-2], "not-the-secret") + "/models")
                assert wrong.status_code == 404
                await session.complete(Trajectory())
            async with httpx.AsyncClient(timeout=30) as http:
                assert (await http.get(f"{base}/models")).status_code == 404  # the attempt is over
    assert rec.records["t"] == []  # an unanswered request is no exchange


def test_a_request_that_rewrites_history_starts_a_branch_and_replies_are_matched_leniently():
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a"}'}}
    sent_back = {**call, "function": {"name": "read_file", "arguments": '{ "path" : "a" }'}}  # JSON spacing differs
    exchanges = [
        Exchange(messages=QUESTION, tools=TOOLS, template_kwargs=None, reply={"role": "assistant", "tool_calls": [call]}),
        Exchange(messages=[*QUESTION, {"role": "assistant", "content": None, "tool_calls": [sent_back]},
                           {"role": "tool", "tool_call_id": "c1", "content": "x"}], tools=TOOLS, template_kwargs=None,
                 reply={"role": "assistant", "content": "x "}),
        Exchange(messages=[{"role": "user", "content": "a title for this chat?"}], tools=None, template_kwargs=None,
                 reply={"role": "assistant", "content": "Notes"}),
        Exchange(messages=QUESTION, tools=TOOLS, template_kwargs=None, reply=None),  # never answered: left out
    ]
    calls = calls_of_exchanges(exchanges)
    assert [(c.index, c.branch, c.parent) for c in calls] == [(0, 0, None), (1, 0, 0), (2, 1, None)]
