"""From a kept trial to demonstrations: the gateway's record copied per branch, or re-rendered in the policy's
tokenizer; which trials are kept at all. The records are real: a real gateway in front of the scripted teacher."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from tackroom import TokenTurn, Trajectory, TrialResult
from tackroom_app import TrialErrorInfo
from tackroom_gateway import (
    ChatTemplate,
    EngineSettings,
    GatewaySettings,
    GatewayTrialSession,
    PolicyGateway,
    load_tokenizer,
)
from tackroom_train.collect.conversion import PolicySide, TrialEpisode, convert_trial, flatten_branch
from tackroom_train.collect.recording import EngineCall, calls_from_turns, calls_of_session
from tackroom_train.collect.run import HarnessPlan, judge, load_policy_side, same_tokenizer
from tackroom_train.collect.teacher import ScriptedTeacher, serve_teacher

TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "notes.txt"}}\n</tool_call>'
QUESTION = [{"role": "system", "content": "Answer with one word."}, {"role": "user", "content": "What is in notes.txt?"}]


@pytest.fixture(scope="module")
def smollm2() -> PolicySide:
    return load_policy_side("smollm2")


@pytest.fixture(scope="module")
def qwen3_template() -> ChatTemplate:
    return ChatTemplate(load_tokenizer("qwen3"))


async def record(template: ChatTemplate, replies: list[str], *, retry_first: bool = False):
    """A gateway session over the scripted teacher: the question, a tool call answered with "blue", the answer
    (and with ``retry_first`` the first request sent twice: a second branch). Returns the engine calls the
    collector reads from the session, and the session."""
    script = list(replies)
    async with serve_teacher(ScriptedTeacher(lambda prompt: script.pop(0), template)) as url:
        settings = GatewaySettings(engine=EngineSettings(base_url=url, backoff_s=0.01, retries=0))
        async with PolicyGateway(settings, template=template) as gateway, httpx.AsyncClient(timeout=30) as http:
            base = gateway.session_base_url("s")

            async def ask(messages):
                answer = await http.post(f"{base}/chat/completions", json={"messages": messages, "tools": TOOLS})
                assert answer.status_code == 200, answer.text
                return answer.json()["choices"][0]["message"]

            first = await ask(QUESTION)
            if retry_first:
                await ask(QUESTION)
            call_id = first["tool_calls"][0]["id"]
            await ask([*QUESTION, first, {"role": "tool", "tool_call_id": call_id, "name": "read_file",
                                          "content": "blue"}])
            calls = calls_of_session(GatewayTrialSession(gateway, "s", {}, None))
            return calls, gateway.session("s")


def episode(*, routing="gateway", same=True, record=None, trajectory=None, reward=1.0) -> TrialEpisode:
    return TrialEpisode(task_id="t", harness="h", reward=reward, source="runs/r/t", routing=routing,
                        same_tokenizer=same, record=record, trajectory=trajectory or Trajectory())


async def test_each_branch_is_flattened_as_the_gateway_flattens_it(smollm2):
    calls, session = await record(smollm2.template, [CALL, CALL, "blue"], retry_first=True)
    assert sorted({c.branch for c in calls}) == [0, 1]
    for branch in (0, 1):
        gateway_view = session.trajectory(branch)
        assert flatten_branch(calls, branch) == (gateway_view.token_ids, gateway_view.loss_mask)

    made = convert_trial(episode(record=calls), smollm2)

    assert made.how == "recorded" and [d.branch for d in made.demonstrations] == [0, 1]
    for row in made.demonstrations:
        assert (row.input_ids, row.loss_mask) == (session.trajectory(row.branch).token_ids,
                                                  session.trajectory(row.branch).loss_mask)
        assert not row.rerendered and row.tokenizer == "smollm2" and row.source == "runs/r/t"
    trained = [smollm2.template.decode([i for i, m in zip(row.input_ids, row.loss_mask, strict=True) if m])
               for row in made.demonstrations]
    # the retry (branch 1) is the one the conversation went on from: the gateway extends the newest match
    assert trained == [f"{CALL}<|im_end|>", f"{CALL}<|im_end|>blue<|im_end|>"]


async def test_the_record_keeps_the_tools_the_harness_sent(smollm2):
    calls, _ = await record(smollm2.template, [CALL, "blue"])
    assert all(c.tools_known and c.tools == TOOLS and c.messages for c in calls)
    assert calls[1].parent == 0 and calls[1].reply["content"] == "blue"


async def test_a_teacher_in_another_tokenizer_is_rerendered_in_the_policys(smollm2, qwen3_template):
    think = "<think>\n\n</think>\n\n"
    calls, session = await record(qwen3_template, [think + CALL, think + "blue"])

    made = convert_trial(episode(record=calls, same=False), smollm2)

    assert made.how == "rerendered"
    (row,) = made.demonstrations
    assert row.rerendered and max(row.input_ids) < smollm2.vocab_size
    text = smollm2.template.decode(row.input_ids)
    assert "read_file" in text and "<tool_response>\nblue\n</tool_response>" in text  # tools and tool result
    trained = smollm2.template.decode([i for i, m in zip(row.input_ids, row.loss_mask, strict=True) if m])
    assert trained == f"{CALL}<|im_end|>blue<|im_end|>"
    assert row.input_ids != session.trajectory().token_ids  # the teacher's ids were Qwen3's


async def test_ids_outside_the_policys_vocabulary_are_refused(smollm2, qwen3_template):
    calls, _ = await record(qwen3_template, ["<think>\n\n</think>\n\n" + CALL, "blue"])  # Qwen3 ids: up to 151k
    made = convert_trial(episode(record=calls, same=True), smollm2)  # wrongly claimed to be the policy's
    assert not made.demonstrations and "outside the policy tokenizer's vocabulary" in made.reason


async def test_turns_a_harness_returned_never_stand_in_for_the_gateways_record(smollm2):
    """Routed through the gateway, the demonstration is the gateway's record, whatever the trajectory says."""
    calls, session = await record(smollm2.template, [CALL, "blue"])
    forged = Trajectory(turns=[TokenTurn(prompt_ids=[1, 2, 3], completion_ids=[4, 5, 6])],
                        token_ids=[1, 2, 3, 4, 5, 6], loss_mask=[0, 0, 0, 1, 1, 1],
                        messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": "y",
                                                                     "token_ids": [4, 5, 6]}])
    made = convert_trial(episode(record=calls, trajectory=forged), smollm2)
    assert made.demonstrations[0].input_ids == session.trajectory().token_ids


def test_a_gateway_session_with_no_call_gives_no_demonstration(smollm2):
    made = convert_trial(episode(record=[]), smollm2)
    assert not made.demonstrations and "no call to the teacher" in made.reason


def test_without_a_gateway_the_transcript_is_rerendered(smollm2):
    transcript = Trajectory(messages=[{"role": "user", "content": "Say blue."}, {"role": "assistant", "content": "blue"}])
    made = convert_trial(episode(routing="direct", same=False, trajectory=transcript), smollm2)
    assert made.how == "rerendered" and made.demonstrations[0].rerendered
    row = made.demonstrations[0]
    assert smollm2.template.decode([i for i, m in zip(row.input_ids, row.loss_mask, strict=True) if m]) == "blue<|im_end|>"


def test_a_transcript_with_tool_calls_but_no_record_of_the_tools_is_skipped_with_the_reason(smollm2):
    transcript = Trajectory(messages=[*QUESTION, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}])
    made = convert_trial(episode(routing="direct", same=False, trajectory=transcript), smollm2)
    assert not made.demonstrations and "tools the harness declared" in made.reason


def test_a_harness_that_recorded_nothing_gives_the_reason(smollm2):
    made = convert_trial(episode(routing="direct", same=False), smollm2)
    assert not made.demonstrations and "recorded no messages" in made.reason


def test_a_token_level_harness_turns_are_copied_with_their_lineage(smollm2):
    """A ``token_ids`` harness (archipelago) records its own engine calls: copied, a turn's parent found by its
    prompt extending the earlier turn's prompt and completion; a new segment (a restart) is its own branch."""
    turns = [TokenTurn(prompt_ids=[1, 2], completion_ids=[3, 4]),
             TokenTurn(prompt_ids=[1, 2, 3, 4, 5], completion_ids=[6]),
             TokenTurn(prompt_ids=[1, 9], completion_ids=[7, 8], branch=1)]
    assert [c.parent for c in calls_from_turns(turns)] == [None, 0, None]
    made = convert_trial(episode(routing="token_ids", trajectory=Trajectory(turns=turns)), smollm2)
    assert made.how == "recorded"
    assert [(d.branch, d.input_ids, d.loss_mask) for d in made.demonstrations] == [
        (0, [1, 2, 3, 4, 5, 6], [0, 0, 1, 1, 0, 1]), (1, [1, 9, 7, 8], [0, 0, 1, 1])]


def test_a_record_whose_calls_do_not_extend_each_other_is_refused(smollm2):
    calls = [EngineCall(index=0, prompt_ids=[1, 2], completion_ids=[3]),
             EngineCall(index=1, prompt_ids=[1, 5, 3, 4], completion_ids=[6], parent=0)]
    made = convert_trial(episode(record=calls), smollm2)
    assert not made.demonstrations and "inconsistent" in made.reason


# -- which trials are kept ------------------------------------------------------------------------------
def outcome(reward, error=None):
    result = TrialResult(trial_id="t__h__p0", task="t", harness="h", sandbox="local", verifier="test-script",
                         reward=reward, error=error)
    transcript = Trajectory(messages=[{"role": "user", "content": "Say blue."}, {"role": "assistant", "content": "blue"}])
    return SimpleNamespace(result=result, trajectory=transcript)


PLAN = HarnessPlan(row=None, harness=None, plugins=None, routing="direct", same_tokenizer=False)


@pytest.mark.parametrize("error_class", ["model", "task", "infra"])
def test_a_trial_that_ended_in_an_error_is_never_kept_whatever_its_reward(smollm2, error_class):
    error = TrialErrorInfo(error_class=error_class, type="SomeError", message="it broke", phase="harness_run")
    verdict, rows = judge(outcome(1.0, error), PLAN, Path("runs/r"), smollm2, min_reward=0.0)
    assert not verdict.kept and rows == [] and error_class in verdict.reason


def test_a_trial_below_the_threshold_is_not_kept_and_one_at_it_is(smollm2):
    low, rows = judge(outcome(0.5), PLAN, Path("runs/r"), smollm2, min_reward=1.0)
    assert not low.kept and rows == [] and "below min_reward 1" in low.reason
    met, rows = judge(outcome(1.0), PLAN, Path("runs/r"), smollm2, min_reward=1.0)
    assert met.kept and met.demonstrations == 1 and met.trained_tokens == rows[0].trained_tokens > 0
    assert rows[0].source == str(Path("runs/r") / "t__h__p0") and rows[0].reward == 1.0


def test_tokenizers_are_the_same_by_name_or_by_folder(tmp_path):
    from tackroom_gateway import tokenizer_dir

    assert same_tokenizer("smollm2", "smollm2") and same_tokenizer(str(tokenizer_dir("smollm2")), "smollm2")
    assert not same_tokenizer("qwen3", "smollm2") and not same_tokenizer(None, "smollm2")
    assert not same_tokenizer(str(tmp_path / "missing"), "smollm2")


async def test_an_assistant_message_the_harness_wrote_is_context_not_a_demonstration(smollm2):
    """OpenCode puts its own "maximum steps reached" notice into the conversation as an assistant message. The
    teacher never wrote it, and the policy gateway renders it for the policy as context (mask 0): a re-rendered
    demonstration must do the same, token for token, or SFT teaches the policy to write the harness's notice."""
    notice = {"role": "assistant", "content": "CRITICAL - MAXIMUM STEPS REACHED. Respond with text only."}
    script = [CALL, "blue"]
    async with serve_teacher(ScriptedTeacher(lambda prompt: script.pop(0), smollm2.template)) as url:
        settings = GatewaySettings(engine=EngineSettings(base_url=url, backoff_s=0.01, retries=0))
        async with PolicyGateway(settings, template=smollm2.template) as gateway, httpx.AsyncClient(timeout=30) as http:
            base = gateway.session_base_url("s")
            conversation = list(QUESTION)
            for _ in range(2):
                answer = await http.post(f"{base}/chat/completions", json={"messages": conversation, "tools": TOOLS})
                assert answer.status_code == 200, answer.text
                reply = answer.json()["choices"][0]["message"]
                conversation.append(reply)
                for call in reply.get("tool_calls") or []:
                    conversation += [{"role": "tool", "tool_call_id": call["id"], "name": "read_file",
                                      "content": "blue"}, notice]
            calls = calls_of_session(GatewayTrialSession(gateway, "s", {}, None))
            policy_view = gateway.session("s").trajectory()

    made = convert_trial(episode(record=calls, same=False), smollm2)  # re-rendered from the record's messages

    (row,) = made.demonstrations
    assert made.how == "rerendered"
    assert (row.input_ids, row.loss_mask) == (policy_view.token_ids, policy_view.loss_mask)
    trained = smollm2.template.decode([i for i, m in zip(row.input_ids, row.loss_mask, strict=True) if m])
    assert trained == f"{CALL}<|im_end|>blue<|im_end|>"
    assert "MAXIMUM STEPS" in smollm2.template.decode(row.input_ids)  # kept, as context
