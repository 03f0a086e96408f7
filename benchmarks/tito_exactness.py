"""Token exactness of the policy gateway vs naive re-tokenization, over a corpus of multi-turn transcripts.

    uv run python benchmarks/tito_exactness.py                          # replay, SmolLM2 + Qwen3 tokenizers
    uv run python benchmarks/tito_exactness.py --engine http://127.0.0.1:8011/v1   # + live SmolLM2 on vLLM

Replay: each transcript in benchmarks/data/tito_transcripts.json is played through
a real PolicyGateway (real tokenizer, real chat template) in front of a replay
engine that returns, turn by turn, the ids the "model" generated (each text piece
tokenized on its own, as a sampler may split words; a ``<think>`` block where the
tokenizer has one). The client loop sends back the gateway's replies, like an
agent harness. Live: the same user/tool messages, but the assistant turns come
from the real engine (temperature 0.7; tool calls forced where the corpus has one).

For every transcript the engine's truth is the last prompt it received plus the
last completion it produced. Counted, in tokens (difflib opcodes):

* gateway: trajectory ``token_ids`` vs that truth, plus every turn's recorded
  completion/prompt vs what the engine produced/received (goal: 0);
* naive final: the finished transcript re-rendered with the chat template and
  re-tokenized (what a trainer re-tokenizing logs would train on);
* naive per-turn: a gateway that re-renders each request from messages; tokens of
  the model's own earlier output its prompts fail to reproduce.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import json
import re
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tackroom_gateway import ChatTemplate, EngineSettings, GatewaySettings, PolicyGateway, load_tokenizer

CORPUS = Path(__file__).parent / "data" / "tito_transcripts.json"


class ReplayEngine:
    """Answers /v1/completions with the next scripted completion ids, recording the prompts it received."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.script: list[tuple[list[int], str]] = []
        self.prompts: list[list[int]] = []
        self.completions: list[list[int]] = []
        self.app = Starlette(routes=[Route("/v1/models", self.models), Route("/v1/completions", self.complete, methods=["POST"])])

    async def models(self, request: Request) -> JSONResponse:
        return JSONResponse({"data": [{"id": "replay", "max_model_len": 32768}]})

    async def complete(self, request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        ids, reason = self.script.pop(0)
        self.prompts.append(body["prompt"])
        self.completions.append(ids)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        lp = {"tokens": [""] * len(ids), "token_logprobs": [-0.5] * len(ids), "top_logprobs": [{}] * len(ids)}
        choice = {"index": 0, "text": text, "token_ids": ids, "prompt_token_ids": body["prompt"], "finish_reason": reason, "logprobs": lp}
        return JSONResponse({"choices": [choice]})


@contextlib.asynccontextmanager
async def serve(app: Any):
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="off"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        await task


def token_diff(a: list[int], b: list[int]) -> int:
    """Tokens that differ between two sequences (replacements, insertions, deletions)."""
    sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in sm.get_opcodes() if op != "equal")


def scripted_ids(tok: Any, turn: dict[str, Any], thinks: bool) -> tuple[list[int], str]:
    a = turn["assistant"]
    pieces = list(a["pieces"])
    if thinks and a.get("think"):
        pieces.insert(0, f"<think>\n{a['think']}\n</think>\n\n")
    ids = [i for p in pieces for i in tok.encode(p, add_special_tokens=False)]
    reason = a.get("finish_reason", "stop")
    if reason == "stop":
        ids.append(tok.convert_tokens_to_ids("<|im_end|>"))
    return ids, reason


def forced_tool(turn: dict[str, Any]) -> str | None:
    """The tool the corpus's assistant calls in this turn, if any (live mode forces the model to call it)."""
    m = re.search(r'<tool_call>\s*\{\s*"name":\s*"([^"]+)"', "".join(turn["assistant"]["pieces"]))
    return m.group(1) if m else None


async def play(gw: PolicyGateway, transcript: dict[str, Any], session: str, live: bool) -> list[dict[str, Any]]:
    """The client loop; returns the per-turn message lists it sent, plus the final transcript last."""
    messages: list[dict[str, Any]] = []
    sent: list[list[dict[str, Any]]] = []
    tools = transcript.get("tools") or None
    pending_ids: list[str] = []
    async with httpx.AsyncClient(base_url=gw.session_base_url(session), timeout=300) as c:
        for turn in transcript["turns"]:
            for m in turn["new"]:
                m = dict(m)
                if m["role"] == "tool":
                    m["tool_call_id"] = pending_ids.pop(0) if pending_ids else "call_0"
                messages.append(m)
            body: dict[str, Any] = {"messages": messages, "max_tokens": 96}
            if tools:
                body["tools"] = tools
            if live:
                body["temperature"] = 0.7
                name = forced_tool(turn)
                if name and tools:
                    body["tool_choice"] = {"type": "function", "function": {"name": name}}
            sent.append(list(messages))
            r = await c.post("/chat/completions", json=body)
            if r.status_code != 200:
                raise SystemExit(f"{transcript['name']}: gateway answered {r.status_code}: {r.text}")
            reply = r.json()["choices"][0]["message"]
            pending_ids = [tc["id"] for tc in reply.get("tool_calls") or []]
            if transcript.get("client_strips") and reply.get("content"):
                reply = {**reply, "content": reply["content"].strip()}
            messages.append(reply)
    return [*sent, messages]


async def run_tokenizer(name: str, corpus: list[dict[str, Any]], engine_url: str | None) -> dict[str, Any]:
    tok = load_tokenizer(name)
    tmpl = ChatTemplate(tok)
    thinks = tmpl.think_tokens
    replay = ReplayEngine(tok)
    row = {"tokenizer": name, "mode": "live" if engine_url else "replay", "transcripts": 0, "turns": 0, "tokens": 0,
           "gateway": 0, "naive_final": 0, "naive_final_transcripts": 0, "naive_turn": 0, "naive_turn_breaks": 0}
    async with contextlib.AsyncExitStack() as stack:
        url = engine_url or await stack.enter_async_context(serve(replay.app))
        gw = PolicyGateway(GatewaySettings(engine=EngineSettings(base_url=url)), template=tmpl)
        await gw.start()
        stack.push_async_callback(gw.stop)
        for i, tr in enumerate(corpus):
            if not engine_url:
                replay.script = [scripted_ids(tok, t, thinks) for t in tr["turns"]]
                replay.prompts, replay.completions = [], []
            sid = f"t{i}"
            sent = await play(gw, tr, sid, live=bool(engine_url))
            final = sent.pop()
            traj = gw.trajectory(sid)
            tools = tr.get("tools") or None
            if engine_url:  # the engine's echo of each prompt was compared by the gateway (notes)
                prompts = [t.prompt_ids for t in traj.turns]
                completions = [t.completion_ids for t in traj.turns]
                row["gateway"] += sum(1 for n in traj.notes if "differ from those sent" in n)
            else:
                prompts, completions = replay.prompts, replay.completions
            truth = prompts[-1] + completions[-1]
            row["gateway"] += token_diff(traj.token_ids, truth)
            row["gateway"] += sum(token_diff(t.completion_ids, c) + token_diff(t.prompt_ids, p) for t, c, p in zip(traj.turns, completions, prompts, strict=True))
            generated = [t for t, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m]
            row["gateway"] += token_diff(generated, [i for c in completions for i in c])
            naive = tmpl.encode(tmpl.render(final, tools=tools, add_generation_prompt=False))
            # the render closes the last assistant turn; close the truth the same way before comparing
            closed = bool(completions[-1]) and completions[-1][-1] == tmpl.end_of_turn_id
            closing = tmpl.closing_text[len(tmpl.end_of_turn_text) :] if closed else tmpl.closing_text
            d = token_diff(naive, truth + tmpl.encode(closing))
            row["naive_final"] += d
            row["naive_final_transcripts"] += d > 0
            for k in range(1, len(sent)):
                naive_prompt = tmpl.render_ids(sent[k], tools=tools)
                own = prompts[k - 1] + completions[k - 1]
                miss = token_diff(naive_prompt[: len(own)], own)
                row["naive_turn"] += miss
                row["naive_turn_breaks"] += miss > 0
            row["transcripts"] += 1
            row["turns"] += len(traj.turns)
            row["tokens"] += len(truth)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", action="append", help="smollm2, qwen3 or a folder (repeatable; default both)")
    ap.add_argument("--engine", help="also replay live against this engine (SmolLM2 on vLLM)")
    args = ap.parse_args()
    corpus = json.loads(CORPUS.read_text(encoding="utf-8"))["transcripts"]
    rows = [asyncio.run(run_tokenizer(t, corpus, None)) for t in args.tokenizer or ["smollm2", "qwen3"]]
    if args.engine:
        rows.append(asyncio.run(run_tokenizer("smollm2", corpus, args.engine)))
    head = f"{'tokenizer':<10} {'mode':<7} {'transcripts':>11} {'turns':>5} {'tokens':>7} | {'gateway mismatches':>18} | {'naive final: tokens (transcripts)':>33} | {'naive per-turn: tokens (turns)':>30}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['tokenizer']:<10} {r['mode']:<7} {r['transcripts']:>11} {r['turns']:>5} {r['tokens']:>7} | {r['gateway']:>18} | "
            f"{str(r['naive_final']) + ' (' + str(r['naive_final_transcripts']) + '/' + str(r['transcripts']) + ')':>33} | "
            f"{str(r['naive_turn']) + ' (' + str(r['naive_turn_breaks']) + '/' + str(r['turns'] - r['transcripts']) + ')':>30}"
        )
    print("\ngoal: gateway mismatches = 0; naive columns show what re-tokenizing would have gotten wrong")


if __name__ == "__main__":
    main()
