"""vLLM's ``/v1/completions`` (token-id prompts) over a Tinker sampling client.

Harnesses and the policy gateway reach engines over HTTP; this endpoint makes
the Tinker server's sampler look like the vLLM engine they already speak to,
so the rollout path is the same as on the GPU backend. It answers with the exact
token ids the sampler produced and their logprobs (``return_token_ids``), and
stops at the tokenizer's end-of-sequence ids (the Tinker sampler does not stop
there by itself), keeping the stop token in ``token_ids`` as vLLM does.

The Tinker sampler has no constrained decoding (no grammar, schema, logit bias or
allowed-token list), so a request asking for one (``response_format`` other than
text, ``structured_outputs``, ``guided_*``, ``logit_bias``, ``allowed_token_ids``,
``bad_words``) is answered 400 and remembered in :attr:`SamplingEndpoint.refused`:
sampling unconstrained behind the harness's back would train on replies the harness
never asked for. The trainer turns a refusal into a :class:`ConfigError` naming the
fields (see :func:`constraint_error`).

Every request is sampled with ``max_tokens`` rounded up to one of a few sizes
(:func:`sampled_max_tokens`: at least 16, then two significant binary digits,
within the context) and its answer cut back to what was asked. SkyRL's JAX
sampler compiles a kernel for every distinct ``max_tokens`` (a static shape; minutes
on a small CPU): a gateway's one-token liveness probe or a harness that asks for what
is left of its budget would otherwise each stall the engine in a compile. The cut is
exact: the first N tokens of a longer sample are a sample of N tokens, and a
sequence cut before its stop token ends as ``length``, as it would have.

Routes: ``GET /v1/models``, ``POST /v1/completions`` (``stream`` answered as
one chunk), ``GET /health``. The trainer swaps :attr:`sampler` after each
optimiser step.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tackroom_gateway import InLoopServer

STOPPED = "the Tinker sampling endpoint stopped (the training run is ending); the request was cut off"

CONSTRAINED_FIELDS = ("response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice",
                      "guided_grammar", "logit_bias", "allowed_token_ids", "bad_words")
"""Request fields that constrain decoding, which the Tinker sampler cannot honour."""


def constrained_fields(body: dict[str, Any]) -> list[str]:
    """The fields of ``body`` that ask for constrained decoding (``response_format: {"type": "text"}`` does not)."""
    out = []
    for name in CONSTRAINED_FIELDS:
        value = body.get(name)
        if value in (None, {}, []):
            continue
        if name == "response_format" and isinstance(value, dict) and value.get("type") == "text":
            continue
        out.append(name)
    return out


def constraint_error(refused: dict[str, int]) -> str:
    """Why a run stops when its harness asked the Tinker sampler for constrained decoding, and the fix."""
    listed = ", ".join(f"{k} ({n}x)" for k, n in sorted(refused.items()))
    return (f"the harness asked the Tinker sampling endpoint for constrained decoding ({listed}); SkyRL's Tinker "
            "sampler has none, and sampling unconstrained would train on replies the harness did not ask for. "
            "Turn it off in [harness]: terminus: structured_outputs = false; archipelago: tool_choice = \"auto\" "
            "(its default); opencode/others: drop response_format / structured_outputs from [policy] sampling")


MIN_SAMPLED_TOKENS = 16


def sampled_max_tokens(requested: int, room: int | None = None) -> int:
    """``requested`` rounded up to at least 16 and two significant binary digits (16, 24, 32, 48, 64, 96, …),
    or ``requested`` itself when that would not fit in ``room`` (the context left after the prompt)."""
    n = max(requested, MIN_SAMPLED_TOKENS)
    top = 1 << (n.bit_length() - 1)
    half = top >> 1
    rounded = top if n == top else (top + half if n <= top + half else top << 1)
    return rounded if room is None or rounded <= room else requested


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error" if status < 500 else "server_error",
                                   "code": status}}, status_code=status)


class SamplingEndpoint:
    """Serve ``sampler`` (a ``tinker.SamplingClient``) on loopback in this event loop."""

    def __init__(self, sampler: Any, tokenizer: Any, model_name: str, *, max_model_len: int | None = None,
                 stop_token_ids: list[int] | None = None, host: str = "127.0.0.1", port: int = 0,
                 timeout_s: float = 900.0) -> None:
        self.sampler = sampler
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.max_model_len = max_model_len
        eos = stop_token_ids if stop_token_ids is not None else [getattr(tokenizer, "eos_token_id", None)]
        self.stop_token_ids = sorted({int(t) for t in eos if t is not None})
        self.host, self.port = host, port
        self.timeout_s = timeout_s
        self.requests = 0
        self.refused: dict[str, int] = {}
        """Constrained-decoding fields refused so far, with counts (see the module docstring)."""
        self._sampling: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self.app = Starlette(routes=[
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/completions", self._completions, methods=["POST"]),
            Route("/health", self._health, methods=["GET"]),
        ])
        self._server = InLoopServer(self.app, what="the Tinker sampling endpoint", host=host, port=port)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> SamplingEndpoint:
        self.port = await self._server.start()
        return self

    async def stop(self) -> None:
        """Stop serving. Samples still running are cut off first, so their clients get a 503 saying why
        (not a dropped connection) and nothing is left for uvicorn to cancel and log as a traceback."""
        self._stopping = True
        for sample in list(self._sampling):
            sample.cancel()
        if self._sampling:
            await asyncio.wait(self._sampling, timeout=5)
        await self._server.stop()

    async def __aenter__(self) -> SamplingEndpoint:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- routes ------------------------------------------------------------------------
    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": self.model_name})

    async def _models(self, request: Request) -> Response:
        entry: dict[str, Any] = {"id": self.model_name, "object": "model", "owned_by": "tackroom-tinker"}
        if self.max_model_len:
            entry["max_model_len"] = self.max_model_len
        return JSONResponse({"object": "list", "data": [entry]})

    def _prompt_ids(self, prompt: Any) -> list[int]:
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
            prompt = prompt[0]
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt) and prompt:
            return prompt
        if isinstance(prompt, str):
            return list(self.tokenizer.encode(prompt, add_special_tokens=False))
        raise ValueError("prompt must be one string or one list of token ids (n > 1 batches are not supported)")

    def sampling_params(self, body: dict[str, Any]) -> Any:
        from tinker import types

        ids = [*self.stop_token_ids, *(int(t) for t in body.get("stop_token_ids") or [])]
        words = body.get("stop") or []
        words = [words] if isinstance(words, str) else list(words)
        # Tinker takes stop ids or stop strings, not both: with strings, the ids go along as their text
        stop: list[int] | list[str] = [*(self.tokenizer.decode([t]) for t in ids), *words] if words else ids
        return types.SamplingParams(
            max_tokens=int(body.get("max_tokens") or 16),
            temperature=float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0),
            top_p=float(body.get("top_p") or 1.0),
            top_k=int(body.get("top_k") or -1),
            seed=body.get("seed"),
            stop=stop or None,
        )

    async def _completions(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
            if int(body.get("n") or 1) != 1:
                return _error(400, "n > 1 is not supported; send one request per sample")
            constrained = constrained_fields(body)
            if constrained:
                for name in constrained:
                    self.refused[name] = self.refused.get(name, 0) + 1
                return _error(400, f"the Tinker sampler cannot constrain decoding ({', '.join(constrained)}): "
                                   "turn structured outputs / required tool calls off in the harness")
            prompt_ids = self._prompt_ids(body.get("prompt"))
            params = self.sampling_params(body)
        except (ValueError, TypeError) as exc:
            return _error(400, str(exc))
        if self.max_model_len and len(prompt_ids) + params.max_tokens > self.max_model_len:
            return _error(400, f"This model's maximum context length is {self.max_model_len} tokens; the prompt has "
                               f"{len(prompt_ids)} and max_tokens is {params.max_tokens}")
        from tinker import types

        if self._stopping:
            return _error(503, STOPPED)
        self.requests += 1
        requested = params.max_tokens
        room = self.max_model_len - len(prompt_ids) if self.max_model_len else None
        params = params.model_copy(update={"max_tokens": sampled_max_tokens(requested, room)})
        sample = asyncio.ensure_future(asyncio.wait_for(self.sampler.sample_async(
            prompt=types.ModelInput.from_ints(prompt_ids), num_samples=1, sampling_params=params), self.timeout_s))
        self._sampling.add(sample)
        try:
            result = await sample
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._stopping and current is not None and not current.cancelling():
                return _error(503, STOPPED)  # cut off by stop(), not a client that went away
            sample.cancel()
            raise
        except TimeoutError:  # the Tinker SDK retries a dead server for ever
            return _error(503, f"Tinker sampler sent nothing for {self.timeout_s:.0f}s (is the server alive?)")
        except Exception as exc:  # the Tinker SDK's own retries are spent: the engine is down or failing
            return _error(503, f"Tinker sampler failed: {type(exc).__name__}: {exc}")
        finally:
            self._sampling.discard(sample)
        seq = result.sequences[0]
        ids = [int(t) for t in seq.tokens]
        logprobs = [float(x) for x in seq.logprobs] if seq.logprobs is not None else None
        stopped = str(seq.stop_reason) == "stop"
        if len(ids) > requested:  # sampled past what was asked (see sampled_max_tokens): the asked-for sample
            ids, stopped = ids[:requested], False
            logprobs = logprobs[:requested] if logprobs is not None else None
        choice: dict[str, Any] = {
            "index": 0,
            "text": self.tokenizer.decode(ids, skip_special_tokens=True),
            "token_ids": ids,
            "prompt_token_ids": prompt_ids,
            "finish_reason": "stop" if stopped else "length",
            "stop_reason": ids[-1] if stopped and ids and ids[-1] in self.stop_token_ids else None,
            "logprobs": None if logprobs is None else {
                "token_logprobs": logprobs, "tokens": self.tokenizer.convert_ids_to_tokens(ids), "top_logprobs": None,
                "text_offset": None},
        }
        out = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
               "model": self.model_name, "choices": [choice],
               "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids),
                         "total_tokens": len(prompt_ids) + len(ids)}}
        if not body.get("stream"):
            return JSONResponse(out)

        async def events() -> Any:
            yield f"data: {json.dumps(out)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")
