"""Token-in-token-out with the real SmolLM2 and Qwen3 tokenizers.

Each test shows a concrete multi-turn case where re-rendering the transcript with
the chat template and re-tokenizing it (the naive approach) yields different ids
from those the engine actually consumed and produced, and checks that the
gateway's trajectory holds the engine's ids exactly. The engine is the scripted
FakeEngineForTests because the point is chosen completion ids (and no Qwen3 model
runs here); test_engine_e2e.py repeats the SmolLM2 case with the real vLLM.
"""

from __future__ import annotations

import json

import httpx
from fake_engine import Scripted, gateway_over_fake

from tackroom_gateway import ChatTemplate

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def ids_of(tok, *pieces: str, eot: bool = True) -> list[int]:
    """Completion ids as a model may sample them: each piece tokenized on its own (so splits can be non-canonical)."""
    out: list[int] = []
    for p in pieces:
        out += tok.encode(p, add_special_tokens=False)
    if eot:
        out.append(tok.convert_tokens_to_ids("<|im_end|>"))
    return out


async def run_conversation(gw, session: str, turns: list[list[dict]]) -> list[dict]:
    """Send each turn's new messages after the previous reply, as an agent loop does; return the transcript."""
    messages: list[dict] = []
    async with httpx.AsyncClient(base_url=gw.session_base_url(session), timeout=30) as client:
        for new in turns:
            messages += new
            r = await client.post("/chat/completions", json={"messages": messages, "tools": TOOLS, "temperature": 0.7})
            assert r.status_code == 200, r.text
            messages.append(r.json()["choices"][0]["message"])
    return messages


def assert_exact(fake, traj, scripted: list[list[int]]) -> None:
    """The trajectory holds exactly what the engine saw and produced, and only those ids are trainable."""
    assert len(traj.turns) == len(scripted) == len(fake.requests)
    for k, turn in enumerate(traj.turns):
        assert turn.prompt_ids == fake.requests[k]["prompt"]
        assert turn.completion_ids == scripted[k]
        assert turn.branch == 0
        if k:
            prev = traj.turns[k - 1]
            assert turn.prompt_ids[: len(prev.prompt_ids) + len(prev.completion_ids)] == prev.prompt_ids + prev.completion_ids
    last = traj.turns[-1]
    assert traj.token_ids == last.prompt_ids + last.completion_ids
    generated = [t for t, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m]
    assert generated == [i for ids in scripted for i in ids]
    assert traj.logprobs is not None and len(traj.logprobs) == len(traj.token_ids)
    assert all(lp == 0.0 for lp, m in zip(traj.logprobs, traj.loss_mask, strict=True) if not m)


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


async def test_smollm2_naive_retokenization_drifts_gateway_is_exact(smollm2_tokenizer):
    tok = smollm2_tokenizer
    scripted = [
        # a tool call with the model's own JSON spacing, "Paris" sampled as "Par" + "is"
        ids_of(tok, '<tool_call>\n{"name": "get_weather", "arguments": { "city": "Par', 'is" }}\n</tool_call>'),
        # an answer with a double space and a trailing newline the client will strip
        ids_of(tok, "It is sunny,  22 C in Paris.\n"),
        ids_of(tok, "Yes, take sunglasses."),
    ]
    async with gateway_over_fake(tok) as (fake, gw):
        fake.push(*(Scripted(completion_ids=s) for s in scripted))
        transcript = await run_conversation(
            gw,
            "smol",
            [
                [{"role": "user", "content": "Weather in Paris?"}],
                [{"role": "tool", "tool_call_id": "x", "content": "sunny, 22 C"}],
                [{"role": "user", "content": "Sunglasses?"}],
            ],
        )
        transcript[1]["tool_calls"][0]["id"] = "x"
        traj = gw.trajectory("smol")

    assert json.loads(transcript[1]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert_exact(fake, traj, scripted)
    # the naive approach: render the whole transcript, tokenize it
    naive = ChatTemplate(tok).render(transcript, tools=TOOLS, add_generation_prompt=False)
    naive_ids = tok.encode(naive, add_special_tokens=False)
    assert naive_ids != traj.token_ids
    at = first_difference(naive_ids, traj.token_ids)
    first_completion = len(traj.turns[0].prompt_ids)
    assert first_completion <= at < first_completion + len(scripted[0])  # drift starts inside turn 1's output
    # and the text differs too: the template re-serializes the arguments
    assert '{"city": "Paris"}' in naive and '{ "city": "Paris" }' in tok.decode(traj.token_ids)


async def test_qwen3_naive_retokenization_drifts_gateway_is_exact(qwen3_tokenizer):
    tok = qwen3_tokenizer
    scripted = [
        ids_of(tok, "<think>\nThe user wants the weather. I should call the tool.\n</think>\n\n", '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>'),
        ids_of(tok, "<think>\nThe tool says sunny.\n</think>\n\n", "Sunny and 22 °C in Paris ☀️"),
        ids_of(tok, "<think>\nShort answer.\n</think>\n\n", "Yes — bring sunglasses."),
    ]
    async with gateway_over_fake(tok) as (fake, gw):
        assert gw.parser.name == "qwen3"
        fake.push(*(Scripted(completion_ids=s) for s in scripted))
        transcript = await run_conversation(
            gw,
            "qwen",
            [
                [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}],
                [{"role": "tool", "tool_call_id": "x", "content": '{"sky": "sunny", "temp_c": 22}'}],
                [{"role": "user", "content": "Sunglasses?"}],
            ],
        )
        traj = gw.trajectory("qwen")

    assert transcript[2]["reasoning_content"] == "The user wants the weather. I should call the tool."
    assert transcript[2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert_exact(fake, traj, scripted)
    naive = ChatTemplate(tok).render(transcript, tools=TOOLS, add_generation_prompt=False)
    naive_ids = tok.encode(naive, add_special_tokens=False)
    assert naive_ids != traj.token_ids
    at = first_difference(naive_ids, traj.token_ids)
    first_completion = len(traj.turns[0].prompt_ids)
    assert first_completion <= at < first_completion + len(scripted[0])
    # Qwen3's template drops earlier turns' reasoning on re-render; the engine saw it
    think = tok.convert_tokens_to_ids("<think>")
    assert naive_ids.count(think) < traj.token_ids.count(think) == 3


async def test_delta_adds_only_the_new_messages(smollm2_tokenizer):
    """Between one turn's completion and the next prompt's end lies exactly the template's text for the new messages."""
    tok = smollm2_tokenizer
    scripted = [ids_of(tok, "Hi there!"), ids_of(tok, "Bye.")]
    async with gateway_over_fake(tok) as (fake, gw):
        fake.push(*(Scripted(completion_ids=s) for s in scripted))
        await run_conversation(gw, "s", [[{"role": "user", "content": "Hello"}], [{"role": "user", "content": "  ciao\t"}]])
        traj = gw.trajectory("s")
    t0, t1 = traj.turns
    added = t1.prompt_ids[len(t0.prompt_ids) + len(t0.completion_ids) :]
    assert tok.decode(added) == "\n<|im_start|>user\n  ciao\t<|im_end|>\n<|im_start|>assistant\n"


async def test_truncated_turn_is_closed_by_the_gateway(smollm2_tokenizer):
    """A completion cut by max_tokens has no end-of-turn token; the next prompt adds the whole closing."""
    tok = smollm2_tokenizer
    cut = ids_of(tok, "A very long answer that was cut", eot=False)
    async with gateway_over_fake(tok) as (fake, gw):
        fake.push(Scripted(completion_ids=cut, finish_reason="length"), Scripted(completion_ids=ids_of(tok, "ok")))
        await run_conversation(gw, "s", [[{"role": "user", "content": "Talk"}], [{"role": "user", "content": "Stop"}]])
        traj = gw.trajectory("s")
    t0, t1 = traj.turns
    assert t0.finish_reason == "length"
    added = t1.prompt_ids[len(t0.prompt_ids) + len(cut) :]
    assert tok.decode(added).startswith("<|im_end|>\n<|im_start|>user\nStop")
