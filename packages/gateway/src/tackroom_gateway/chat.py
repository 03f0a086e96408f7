"""The gateway's chat completions: an OpenAI chat request rendered to the session's exact prompt ids, sent to
the engine as token ids, answered whole or streamed as server-sent events, and recorded in the session
(tokens, logprobs, tool calls). A client that goes away cancels its engine request; every failure is recorded
in the session and answered as an OpenAI error (mid-stream: as an SSE event).

:class:`ChatHandler` is given what it uses: the engine backend (client, template, tool parser, liveness) and
the session store (which tracks the engine requests a session waits on)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from tackroom_gateway.backend import EngineBackend
from tackroom_gateway.chat_template import ChatTemplateError
from tackroom_gateway.dialects.base import Dialect
from tackroom_gateway.dialects.chat import CHAT
from tackroom_gateway.engine_client import EngineCompletion
from tackroom_gateway.errors import (
    BadRequestError,
    ContextLengthExceededError,
    EngineRequestInterruptedError,
    GatewayError,
    GatewayInternalError,
)
from tackroom_gateway.protocol import PASSTHROUGH, ChatCompletionRequest, forced_tool_call_tag
from tackroom_gateway.sessions import SessionStore
from tackroom_gateway.streaming import (
    CANCELLED,
    END,
    ClientGone,
    chat_logprobs,
    client_gone,
    pump_stream,
    queued_behind,
)
from tackroom_gateway.tito import OpenRequest, PromptPlan, TitoSession
from tackroom_gateway.tool_parsers import ParsedOutput
from tackroom_gateway.weight_updates import turn_versions

log = logging.getLogger("tackroom_gateway")


class ChatHandler:
    """Chat completions for the sessions of ``store``, through ``backend``'s engine: :meth:`complete`."""

    def __init__(self, backend: EngineBackend, store: SessionStore) -> None:
        self.backend = backend
        self.store = store

    def _engine_body(self, req: ChatCompletionRequest, plan: PromptPlan) -> dict[str, Any]:
        engine, template = self.backend.engine, self.backend.template
        assert engine is not None and template is not None
        extra = req.model_extra or {}
        body: dict[str, Any] = {"prompt": plan.prompt_ids}
        fields = {**extra, **req.model_dump(exclude_unset=True)}
        for key in PASSTHROUGH:
            if fields.get(key) is not None:
                body[key] = fields[key]
        info = engine.info
        room = (info.max_model_len - len(plan.prompt_ids)) if info and info.max_model_len else None
        if room is not None and room <= 0:
            raise ContextLengthExceededError(
                f"prompt is {len(plan.prompt_ids)} tokens, the engine's context is {info.max_model_len}; "  # type: ignore[union-attr]
                "shorten the conversation (or serve the model with a longer --max-model-len)"
            )
        wanted = req.max_completion_tokens or req.max_tokens
        body["max_tokens"] = min(wanted, room) if wanted and room else (wanted or room or 1024)
        stop_ids = list(req.stop_token_ids or [])
        if template.end_of_turn_id is not None and template.end_of_turn_id not in stop_ids:
            stop_ids.append(template.end_of_turn_id)
        body["stop_token_ids"] = stop_ids
        body["logprobs"] = max(req.top_logprobs or 0, 0) if req.logprobs else 0
        forced = req.forced_tool() if req.tools else None
        if req.tool_choice not in (None, "auto", "none") and not req.tools:
            raise BadRequestError(f"tool_choice {req.tool_choice!r} needs tools")
        if forced is not None:
            if "structured_outputs" in body or "response_format" in body:
                raise BadRequestError("tool_choice required/named cannot be combined with response_format or structured_outputs")
            tag = forced_tool_call_tag(req.tools or [], None if forced is True else forced)
            body["structured_outputs"] = {"structural_tag": json.dumps(tag, ensure_ascii=False)}
        return body

    def _reply(self, parsed: ParsedOutput) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        if parsed.reasoning is not None:
            msg["reasoning_content"] = parsed.reasoning
        if parsed.tool_calls:
            msg["tool_calls"] = [c.openai() for c in parsed.tool_calls]
        return msg

    @staticmethod
    def _finish_reason(engine_reason: str | None, parsed: ParsedOutput) -> str:
        if parsed.tool_calls and engine_reason != "length":
            return "tool_calls"
        return engine_reason or "stop"

    def _record(
        self, session: TitoSession, plan: PromptPlan, ids: list[int], logprobs: list[float] | None, reason: str | None, parsed: ParsedOutput,
        policy_version: int | None = None, constrained: bool = False, token_versions: list[int] | None = None,
    ) -> dict[str, Any]:
        reply = self._reply(parsed)
        session.record(
            plan,
            completion_ids=ids,
            logprobs=logprobs,
            finish_reason=reason,
            reply=reply,
            tool_calls=len(parsed.tool_calls),
            tool_call_parse_failures=parsed.parse_failures,
            policy_version=policy_version,
            logprobs_constrained=constrained,
            token_versions=token_versions,
        )
        return reply

    @staticmethod
    def _constrained(body: dict[str, Any]) -> bool:
        """Whether the engine body (:meth:`_engine_body`) samples under a grammar (a forced tool call, structured
        outputs, a response format): then its logprobs are the constrained distribution's, not the model's own."""
        fmt = body.get("response_format")
        return body.get("structured_outputs") is not None or (isinstance(fmt, dict) and fmt.get("type") != "text")

    async def complete(self, request: Request, session: TitoSession) -> Response:
        """Answer ``request`` (an OpenAI chat completion, streamed or not) in ``session``."""
        return await self.serve(request, session, CHAT)

    async def serve(self, request: Request, session: TitoSession, dialect: Dialect) -> Response:
        """Answer ``request``, written in ``dialect`` (chat completions, Responses, Messages, Gemini), in
        ``session``: the dialect translates the request onto a chat request, the turn is planned, sampled and
        recorded exactly as a chat request's is, and the dialect shapes the answer (whole or as events)."""
        if self.store.stopping:
            raise EngineRequestInterruptedError("the gateway is stopping")
        try:
            await self.backend.prepare()
            assert self.backend.engine is not None and self.backend.parser is not None
            call = dialect.parse(await request.body(), session, {**request.query_params, **request.path_params})
            req = call.request
            try:
                plan = session.plan(req.messages, tools=req.tools, template_kwargs=req.chat_template_kwargs)
            except ChatTemplateError as exc:
                raise BadRequestError(str(exc)) from exc
            except (TypeError, ValueError, AttributeError, KeyError) as exc:  # shapes only the client's messages hold
                raise BadRequestError(f"the messages could not be read: {type(exc).__name__}: {exc}") from exc
            call.prompt_tokens = len(plan.prompt_ids)
            if call.count is not None:
                return JSONResponse(call.count(call.prompt_tokens))
            body = self._engine_body(req, plan)
            if req.stream:
                chunks = await self._chat_stream(request, req, session, plan, body)
                return StreamingResponse(
                    dialect.stream(call, chunks),
                    media_type="text/event-stream",
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                )
            task = asyncio.ensure_future(self.backend.weights.complete(self.backend.engine, body,
                                                                       cuttable=not self._constrained(body)))
            result = await self._engine_answer(request, session, task, self.store.track(session, task), task)
            self.backend.liveness.answered()
            completion = self._chat_response(req, session, plan, result, self._constrained(body))
            return JSONResponse(dialect.respond(call, completion))
        except (ClientGone, ClientDisconnect):
            return Response(status_code=499)  # nobody reads it; uvicorn drops it
        except EngineRequestInterruptedError:
            raise  # the session already knows (request_abandoned)
        except BadRequestError:
            raise  # the client's own mistake; not the trial's engine record
        except GatewayError as exc:
            session.record_error(exc)
            raise
        except Exception as exc:
            log.error("gateway: a %s request failed: %s: %s", dialect.name, type(exc).__name__, exc)
            log.debug("gateway: a %s request failed", dialect.name, exc_info=True)
            err = GatewayInternalError(
                f"the gateway failed on this request ({type(exc).__name__}: {exc}); this is a bug in tackroom's gateway"
            )
            session.record_error(err)
            raise err from exc

    def _interrupted(self, session: TitoSession, entry: OpenRequest) -> EngineRequestInterruptedError:
        reason = entry.cancel_reason or "the engine request was cancelled"
        session.request_abandoned(entry, reason)
        return EngineRequestInterruptedError(f"the engine request was cut off: {reason}")

    async def _engine_answer(
        self, request: Request, session: TitoSession, work: asyncio.Future[Any], entry: OpenRequest,
        answer: asyncio.Future[Any],
    ) -> Any:
        """``answer``'s result, unless the client goes away first: then ``work`` (the engine call) is
        cancelled, the session notes that its request was abandoned, and ``ClientGone`` is raised."""
        gone = asyncio.ensure_future(client_gone(request))
        try:
            await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            if not work.done():
                work.cancel()
                entry.turn_ended = False
                session.request_abandoned(entry, "the gateway stopped")
            answer.cancel()
            raise
        finally:
            gone.cancel()
        if answer.done():
            if answer.cancelled():
                raise self._interrupted(session, entry)
            return answer.result()
        answer.cancel()
        if not work.done():
            work.cancel()
            session.request_abandoned(entry, "the client closed its connection")
        raise ClientGone

    def _chat_response(
        self, req: ChatCompletionRequest, session: TitoSession, plan: PromptPlan, result: EngineCompletion,
        constrained: bool = False,
    ) -> dict[str, Any]:
        assert self.backend.parser is not None
        parsed = self.backend.parser.parse(result.text, parse_tools=req.parse_tools)
        if result.prompt_ids is not None and result.prompt_ids != plan.prompt_ids:
            session.notes.append(f"turn {len(session.turns)}: engine echoed prompt ids that differ from those sent")
        reply = self._record(session, plan, result.completion_ids, result.logprobs, result.finish_reason, parsed,
                             result.policy_version, constrained)
        choice: dict[str, Any] = {
            "index": 0,
            "message": reply,
            "logprobs": chat_logprobs(result.tokens or [], result.logprobs or [], result.top_logprobs or [])
            if req.logprobs
            else None,
            "finish_reason": self._finish_reason(result.finish_reason, parsed),
            "stop_reason": result.stop_reason,  # vLLM's: the stop string (or stop token id) that ended it
        }
        if req.return_token_ids:
            choice["token_ids"] = result.completion_ids
        out = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.backend.model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(plan.prompt_ids),
                "completion_tokens": len(result.completion_ids),
                "total_tokens": len(plan.prompt_ids) + len(result.completion_ids),
            },
        }
        if req.return_token_ids:
            out["prompt_token_ids"] = plan.prompt_ids
        return out

    async def _chat_stream(
        self, request: Request, req: ChatCompletionRequest, session: TitoSession, plan: PromptPlan, body: dict[str, Any]
    ) -> AsyncIterator[dict[str, Any]]:
        """The turn as chat completion chunks (:meth:`_chunks`), once the engine's first piece has come: failures
        before any output are raised here, as plain HTTP errors."""
        assert self.backend.engine is not None and self.backend.parser is not None
        queue: asyncio.Queue[Any] = asyncio.Queue()
        chunks = self.backend.weights.stream(self.backend.engine, body, cuttable=not self._constrained(body))
        pump = asyncio.ensure_future(pump_stream(chunks, queue))
        entry = self.store.track(session, pump)
        first = await self._engine_answer(request, session, pump, entry, asyncio.ensure_future(queue.get()))
        if first is CANCELLED:
            raise self._interrupted(session, entry)
        if isinstance(first, BaseException):
            raise first
        return self._chunks(req, session, plan, queue, pump, entry, first, self._constrained(body))

    def _closing_chunks(self, chunk: Any, owed: Any, parsed: Any, engine_reason: str | None,
                        engine_stop: int | str | None, prompt_tokens: int, completion_tokens: int) -> list[dict[str, Any]]:
        """A stream's last chunks: text the parser still owed, the parsed tool calls, the finish reason (with vLLM's
        ``stop_reason``), then the usage chunk (``choices`` empty)."""
        out: list[dict[str, Any]] = []
        tail: dict[str, Any] = {}
        if owed.reasoning:
            tail["reasoning_content"] = owed.reasoning
        if owed.content:
            tail["content"] = owed.content
        if tail:
            out.append(chunk(tail))
        if parsed.tool_calls:
            out.append(chunk({"tool_calls": [c.openai(index=i) for i, c in enumerate(parsed.tool_calls)]}))
        last = chunk({}, finish=self._finish_reason(engine_reason, parsed))
        last["choices"][0]["stop_reason"] = engine_stop  # as in vLLM's chat chunks: the stop string that ended it
        usage = {**chunk({}), "choices": [], "usage": {"prompt_tokens": prompt_tokens,
                                                       "completion_tokens": completion_tokens,
                                                       "total_tokens": prompt_tokens + completion_tokens}}
        return [*out, last, usage]

    async def _chunks(
        self,
        req: ChatCompletionRequest,
        session: TitoSession,
        plan: PromptPlan,
        queue: asyncio.Queue[Any],
        pump: asyncio.Future[None],
        entry: OpenRequest,
        first: Any,
        constrained: bool = False,
    ) -> AsyncIterator[dict[str, Any]]:
        """The engine's stream as OpenAI chat completion chunks: text and reasoning deltas as they come, the tool
        calls once parsed, a chunk with the finish reason, then always a usage chunk (``choices`` empty; the chat
        dialect drops it unless asked). A failure is recorded in the session and raised as a GatewayError."""
        assert self.backend.parser is not None
        stream_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        model = self.backend.model_name

        def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: dict | None = None) -> dict[str, Any]:
            return {
                "id": stream_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
            }

        incremental = self.backend.parser.stream(parse_tools=req.parse_tools)
        ids: list[int] = []
        logprobs: list[float] = []
        versions: list[int | None] = []  # each of ``ids``'s policy version (a call cut at a weight update goes on)
        engine_reason: str | None = None
        engine_stop: int | str | None = None
        try:
            yield chunk({"role": "assistant", "content": ""})
            piece = first
            while piece is not END:
                if piece is CANCELLED:
                    raise self._interrupted(session, entry)
                if isinstance(piece, BaseException):
                    raise piece
                self.backend.liveness.answered()
                # the chunks queued behind this one go out with it, as one event (each recorded as it came)
                pieces, after = queued_behind(piece, queue)
                for part in pieces:
                    if part.prompt_ids is not None and part.prompt_ids != plan.prompt_ids:
                        session.notes.append(f"turn {len(session.turns)}: engine echoed prompt ids that differ from those sent")
                    ids.extend(part.token_ids)
                    logprobs.extend(part.logprobs)
                    versions.extend([part.policy_version] * len(part.token_ids))
                    if part.finish_reason is not None:
                        engine_reason, engine_stop = part.finish_reason, part.stop_reason
                delta = incremental.feed("".join(part.text for part in pieces))
                out: dict[str, Any] = {}
                if delta.reasoning:
                    out["reasoning_content"] = delta.reasoning
                if delta.content:
                    out["content"] = delta.content
                lp = None
                if req.logprobs:  # per token, each chunk's own as the engine sent it
                    lp = {"content": [entry for part in pieces
                                      for entry in chat_logprobs(part.tokens, part.logprobs, part.top_logprobs)["content"]]}
                if out or lp:
                    yield chunk(out, logprobs=lp)
                piece = await queue.get() if after is None else after
            owed, parsed = incremental.finish()
            version, token_versions = turn_versions(versions)
            self._record(session, plan, ids, logprobs if len(logprobs) == len(ids) else None, engine_reason, parsed,
                         version, constrained, token_versions)
            for closing in self._closing_chunks(chunk, owed, parsed, engine_reason, engine_stop, len(plan.prompt_ids),
                                                len(ids)):
                yield closing
        except GatewayError as exc:
            # Output may have reached the client already: the dialect answers with its own error event.
            if not isinstance(exc, EngineRequestInterruptedError):
                session.record_error(exc)
            raise
        except Exception as exc:
            log.error("gateway: a streamed completion failed: %s: %s", type(exc).__name__, exc)
            log.debug("gateway: a streamed completion failed", exc_info=True)
            err = GatewayInternalError(f"the gateway failed mid-stream ({type(exc).__name__}: {exc})")
            session.record_error(err)
            raise err from exc
        except BaseException:
            # Cancelled (the client went away: Starlette cancels the stream) or closed: the engine
            # request, if still running, is abandoned.
            if not pump.done():
                pump.cancel()
                session.request_abandoned(entry, "the client closed its connection mid-stream")
            raise
        finally:
            if not pump.done():
                pump.cancel()
