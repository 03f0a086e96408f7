"""Google's Gemini API (``generateContent``, ``streamGenerateContent``, ``countTokens``), as google-genai and
@google/genai (the Gemini CLI's client) call it under a custom base URL.

The request is read onto a chat turn: ``contents`` become messages (``model`` turns assistant messages with their
``functionCall`` parts as tool calls, ``thought`` parts as reasoning; ``functionResponse`` parts tool messages),
``systemInstruction`` the system message, ``functionDeclarations`` OpenAI function tools (OpenAPI's upper-case
schema types lowered), ``toolConfig`` the tool choice and ``generationConfig`` the sampling fields. What this
text-only, single-candidate gateway cannot honour (images and files, Google's built-in tools, cached contents,
several candidates, audio or image output) is refused by name with ``INVALID_ARGUMENT``, as Google refuses what it
does not know, rather than answered as if it had been.

Tool call ids: Gemini clients match a ``functionResponse`` to its ``functionCall`` by ``id`` when both carry one
(the gateway sends the parsed call's id; the Gemini CLI prefixes it with the tool's name and sends it back on both)
and otherwise by name and order. Either way the ids are read from the client's history the same way every time, so
a conversation's later requests repeat its earlier messages exactly and the session keeps extending one branch.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError

from tackroom_gateway.dialects.base import Dialect, DialectCall
from tackroom_gateway.errors import BadRequestError, GatewayError
from tackroom_gateway.protocol import ChatCompletionRequest, body_json, problems
from tackroom_gateway.streaming import sse
from tackroom_gateway.tito import TitoSession

METHODS = ("generateContent", "streamGenerateContent", "countTokens")

STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
"""Google's canonical status for each HTTP code the gateway answers (google.rpc.Code)."""

FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS"}

_REQUEST_FIELDS = {"contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "safetySettings",
                   "cachedContent", "labels", "model", "serviceTier", "store"}
"""What a generateContent body may hold; ``safetySettings``, ``labels``, ``serviceTier`` and ``store`` (Google's
billing and logging) mean nothing to a local engine and are ignored."""
_IGNORED_GENERATION = {
    # No effect on a model without a thinking budget, or on text from a single served model: accepted, as the
    # Gemini CLI always sends thinkingConfig.
    "thinkingConfig", "mediaResolution", "routingConfig", "modelSelectionConfig", "enableEnhancedCivicAnswers",
}
_SAMPLING = {"temperature": "temperature", "topP": "top_p", "topK": "top_k", "seed": "seed",
             "presencePenalty": "presence_penalty", "frequencyPenalty": "frequency_penalty"}
_PART_DATA = ("text", "functionCall", "functionResponse", "inlineData", "fileData", "executableCode",
              "codeExecutionResult")
_TOOL_OUTPUT_KEYS = ("output", "result", "content")
"""A function response ``{"output": "text"}`` (the Gemini CLI's shape) is shown to the model as its text."""


class GeminiMethodNotFound(BadRequestError):
    """A ``models/{model}:{method}`` the gateway does not serve: the client's mistake, not the trial's engine record."""

    status_code = 404
    error_type = "not_found_error"
    code = "method_not_found"


def _invalid(message: str) -> BadRequestError:
    return BadRequestError(message)


def _lower_schema(schema: Any) -> Any:
    """An OpenAPI-subset schema (Gemini's ``parameters``/``responseSchema``) as JSON Schema: upper-case types
    (``OBJECT``, ``STRING``) lowered, ``nullable`` folded into the type; chat templates and xgrammar read only
    JSON Schema."""
    if isinstance(schema, list):
        return [_lower_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out[key] = value.lower()
        elif key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: _lower_schema(sub) for name, sub in value.items()}
        elif key in ("items", "anyOf", "oneOf", "allOf", "not", "additionalProperties"):
            out[key] = _lower_schema(value)
        elif key == "propertyOrdering":
            continue  # Gemini's own ordering hint; not JSON Schema
        else:
            out[key] = value
    if out.pop("nullable", False) is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def _text_of_response(response: Any) -> str:
    if isinstance(response, dict) and len(response) == 1:
        (key, value), = response.items()
        if key in _TOOL_OUTPUT_KEYS and isinstance(value, str):
            return value
    return json.dumps(response, ensure_ascii=False)


def _args_of(arguments: str) -> dict[str, Any]:
    """A parsed call's JSON arguments as Gemini's ``args`` object."""
    try:
        args = json.loads(arguments)
    except ValueError:
        return {}
    return args if isinstance(args, dict) else {"value": args}


class _Contents:
    """Gemini ``contents`` read into chat messages, one Content at a time."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.open_calls: list[list[Any]] = []
        """The last model turn's calls not yet answered: ``[id, name]``."""

    def read(self, contents: Any) -> list[dict[str, Any]]:
        if not isinstance(contents, list) or not contents:
            raise _invalid("contents must be a non-empty list of Content objects ({role, parts})")
        for i, content in enumerate(contents):
            if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
                raise _invalid(f"contents[{i}] must be an object with a parts list")
            role = content.get("role") or "user"
            if role == "model":
                self._model(i, content["parts"])
            elif role in ("user", "function"):
                self._user(i, content["parts"])
            else:
                raise _invalid(f"contents[{i}].role is {role!r}; Gemini roles are 'user' and 'model'")
        return self.messages

    @staticmethod
    def _check_part(where: str, part: Any) -> str:
        if not isinstance(part, dict):
            raise _invalid(f"{where} must be an object")
        kinds = [k for k in _PART_DATA if k in part]
        if len(kinds) != 1:
            raise _invalid(f"{where} must hold exactly one of {', '.join(_PART_DATA)}; it has {kinds or 'none'}")
        kind = kinds[0]
        if kind in ("inlineData", "fileData"):
            raise _invalid(f"{where}.{kind}: this gateway serves a text-only model; send text parts only")
        if kind in ("executableCode", "codeExecutionResult"):
            raise _invalid(f"{where}.{kind}: code execution is not served here; declare a function instead")
        if kind == "text" and not isinstance(part["text"], str):
            raise _invalid(f"{where}.text must be a string")
        return kind

    def _model(self, i: int, parts: list[Any]) -> None:
        texts: list[str] = []
        thoughts: list[str] = []
        calls: list[dict[str, Any]] = []
        for k, part in enumerate(parts):
            where = f"contents[{i}].parts[{k}]"
            kind = self._check_part(where, part)
            if kind == "text":
                (thoughts if part.get("thought") else texts).append(part["text"])
            elif kind == "functionCall":
                fc = part["functionCall"]
                if not isinstance(fc, dict) or not isinstance(fc.get("name"), str):
                    raise _invalid(f"{where}.functionCall needs a name")
                args = fc.get("args") or {}
                if not isinstance(args, dict):
                    raise _invalid(f"{where}.functionCall.args must be an object")
                call_id = fc.get("id") or f"call_{i}_{len(calls)}"
                calls.append({"id": call_id, "type": "function",
                              "function": {"name": fc["name"], "arguments": json.dumps(args, ensure_ascii=False)}})
            else:
                raise _invalid(f"{where}.functionResponse belongs in a user turn, not a model turn")
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
        if thoughts:
            msg["reasoning_content"] = "".join(thoughts)
        if calls:
            msg["tool_calls"] = calls
        self.messages.append(msg)
        self.open_calls = [[c["id"], c["function"]["name"]] for c in calls]

    def _answering(self, name: str, given: str | None, i: int, k: int) -> str:
        """The id of the open call a ``functionResponse`` answers: its own id when a call has it, else the first
        open call of that name; a response to no call keeps its id (or gets one from its place)."""
        for pos, (call_id, _) in enumerate(self.open_calls):
            if given is not None and call_id == given:
                del self.open_calls[pos]
                return call_id
        if given is None:
            for pos, (call_id, call_name) in enumerate(self.open_calls):
                if call_name == name:
                    del self.open_calls[pos]
                    return call_id
        return given or f"call_{i}_{k}"

    def _user(self, i: int, parts: list[Any]) -> None:
        texts: list[str] = []

        def flush() -> None:
            if texts:
                self.messages.append({"role": "user", "content": "".join(texts)})
                texts.clear()

        for k, part in enumerate(parts):
            where = f"contents[{i}].parts[{k}]"
            kind = self._check_part(where, part)
            if kind == "text":
                texts.append(part["text"])
            elif kind == "functionResponse":
                fr = part["functionResponse"]
                if not isinstance(fr, dict) or not isinstance(fr.get("name"), str):
                    raise _invalid(f"{where}.functionResponse needs a name")
                flush()
                call_id = self._answering(fr["name"], fr.get("id") or None, i, k)
                self.messages.append({"role": "tool", "tool_call_id": call_id, "name": fr["name"],
                                      "content": _text_of_response(fr.get("response") or {})})
            else:
                raise _invalid(f"{where}.functionCall belongs in a model turn, not a user turn")
        flush()


def _system(instruction: Any) -> dict[str, Any] | None:
    if instruction is None:
        return None
    if isinstance(instruction, str):
        return {"role": "system", "content": instruction}
    if not isinstance(instruction, dict) or not isinstance(instruction.get("parts"), list):
        raise _invalid("systemInstruction must be a Content object ({parts: [{text}]})")
    texts = []
    for k, part in enumerate(instruction["parts"]):
        if not isinstance(part, dict) or not isinstance(part.get("text"), str):
            raise _invalid(f"systemInstruction.parts[{k}] must be a text part")
        texts.append(part["text"])
    return {"role": "system", "content": "\n".join(texts)}


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise _invalid("tools must be a list of Tool objects")
    out: list[dict[str, Any]] = []
    for t, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise _invalid(f"tools[{t}] must be an object")
        other = sorted(k for k in tool if k != "functionDeclarations")
        if other:
            raise _invalid(f"tools[{t}] asks for {', '.join(other)}: only functionDeclarations are served here "
                           "(no Google-hosted tools); declare a function the agent runs itself")
        for d, decl in enumerate(tool.get("functionDeclarations") or []):
            where = f"tools[{t}].functionDeclarations[{d}]"
            if not isinstance(decl, dict) or not isinstance(decl.get("name"), str) or not decl["name"]:
                raise _invalid(f"{where} needs a name")
            if "parameters" in decl and "parametersJsonSchema" in decl:
                raise _invalid(f"{where} sets both parameters and parametersJsonSchema; use one")
            if "parametersJsonSchema" in decl:
                params = decl["parametersJsonSchema"]
            elif "parameters" in decl:
                params = _lower_schema(decl["parameters"])
            else:
                params = {"type": "object", "properties": {}}
            fn: dict[str, Any] = {"name": decl["name"]}
            if decl.get("description"):
                fn["description"] = decl["description"]
            fn["parameters"] = params
            out.append({"type": "function", "function": fn})
    return out or None


def _tool_choice(config: Any, tools: list[dict[str, Any]] | None) -> str | dict[str, Any] | None:
    if config is None:
        return None
    fcc = config.get("functionCallingConfig") if isinstance(config, dict) else None
    if fcc is None:
        return None
    if not isinstance(fcc, dict):
        raise _invalid("toolConfig.functionCallingConfig must be an object")
    mode = str(fcc.get("mode") or "AUTO").upper()
    allowed = fcc.get("allowedFunctionNames") or []
    if mode in ("AUTO", "MODE_UNSPECIFIED", "VALIDATED", "NONE"):
        if allowed:
            raise _invalid("allowedFunctionNames needs functionCallingConfig.mode ANY")
        return "none" if mode == "NONE" else "auto"
    if mode != "ANY":
        raise _invalid(f"functionCallingConfig.mode {mode!r}: use AUTO, ANY or NONE")
    if not allowed:
        return "required"
    names = [(t.get("function") or {}).get("name") for t in tools or []]
    if len(allowed) == 1:
        return {"type": "function", "function": {"name": allowed[0]}}
    if set(allowed) >= set(names):
        return "required"
    raise _invalid("allowedFunctionNames with several names but not all of the declared functions is not served "
                   "here: name one function, or all of them")


def _generation(config: Any, fields: dict[str, Any]) -> None:
    if config is None:
        return
    if not isinstance(config, dict):
        raise _invalid("generationConfig must be an object")
    mime = config.get("responseMimeType")
    schema = config.get("responseJsonSchema")
    if schema is None and config.get("responseSchema") is not None:
        schema = _lower_schema(config["responseSchema"])
    for key, value in config.items():
        if value is None or key in _IGNORED_GENERATION:
            continue
        if key in _SAMPLING:
            fields[_SAMPLING[key]] = value
        elif key == "maxOutputTokens":
            fields["max_tokens"] = value
        elif key == "stopSequences":
            fields["stop"] = value
        elif key == "candidateCount":
            if value != 1:
                raise _invalid("generationConfig.candidateCount must be 1: one session records one trajectory; "
                               "send several requests instead")
        elif key == "responseModalities":
            if [str(m).upper() for m in value] not in (["TEXT"], []):
                raise _invalid(f"generationConfig.responseModalities {value}: this model answers TEXT only")
        elif key in ("responseMimeType", "responseSchema", "responseJsonSchema"):
            continue
        else:
            raise _invalid(f"generationConfig.{key} is not served by this gateway (it serves temperature, topP, "
                           "topK, seed, presencePenalty, frequencyPenalty, maxOutputTokens, stopSequences, "
                           "candidateCount 1, responseMimeType, responseSchema, responseJsonSchema, thinkingConfig)")
    if mime in (None, "text/plain"):
        if schema is not None:
            raise _invalid("responseSchema needs responseMimeType application/json")
    elif mime == "application/json":
        fields["response_format"] = ({"type": "json_object"} if schema is None else
                                     {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}})
    else:
        raise _invalid(f"generationConfig.responseMimeType {mime!r}: use text/plain or application/json")


class GeminiDialect(Dialect):
    """``POST {root}/v1beta/models/{model}:{method}`` (and ``/v1/...``)."""

    name = "gemini"
    paths = ("/v1beta/models/{target}", "/v1/models/{target}")

    def parse(self, raw: bytes, session: TitoSession, path: dict[str, str]) -> DialectCall:
        model, _, method = path.get("target", "").rpartition(":")
        if method not in METHODS or not model:
            raise GeminiMethodNotFound(f"models/{path.get('target', '')}: this gateway serves "
                                       f"models/MODEL:{{{', '.join(METHODS)}}}")
        body = body_json(raw, _invalid)
        if not isinstance(body, dict):
            raise _invalid("request body must be a JSON object")
        if method == "countTokens":
            return self._count(body, session)
        stream = method == "streamGenerateContent"
        if stream and path.get("alt") != "sse":
            raise _invalid("streamGenerateContent is served as server-sent events only: add ?alt=sse to the URL "
                           "(google-genai and @google/genai do)")
        req = self._request(body, stream=stream)
        return DialectCall(request=req, body=body, session=session, state={"model": model})

    def _request(self, body: dict[str, Any], *, stream: bool) -> ChatCompletionRequest:
        unknown = sorted(set(body) - _REQUEST_FIELDS)
        if unknown:
            raise _invalid(f"unknown field(s) {', '.join(unknown)} in a generateContent request")
        if body.get("cachedContent"):
            raise _invalid("cachedContent is not served by this gateway: send the contents themselves")
        messages = _Contents().read(body.get("contents"))
        system = _system(body.get("systemInstruction"))
        if system is not None:
            messages.insert(0, system)
        tools = _tools(body.get("tools"))
        fields: dict[str, Any] = {"messages": messages, "stream": stream}
        if tools:
            fields["tools"] = tools
        choice = _tool_choice(body.get("toolConfig"), tools)
        if choice is not None:
            fields["tool_choice"] = choice
        _generation(body.get("generationConfig"), fields)
        try:
            return ChatCompletionRequest.model_validate(fields)
        except ValidationError as exc:
            raise _invalid(f"invalid generationConfig: {problems(exc)}") from exc

    def _count(self, body: dict[str, Any], session: TitoSession) -> DialectCall:
        """``countTokens``: the prompt a generateContent with these contents would send, counted, not sampled."""
        inner = body.get("generateContentRequest")
        if inner is not None:
            if not isinstance(inner, dict) or set(body) - {"generateContentRequest"}:
                raise _invalid("countTokens takes either contents or a generateContentRequest object, not both")
            req = self._request(inner, stream=False)
        else:
            unknown = sorted(set(body) - {"contents"})
            if unknown:
                raise _invalid(f"unknown field(s) {', '.join(unknown)} in a countTokens request "
                               "(send a generateContentRequest to count with tools and a system instruction)")
            req = self._request(body, stream=False)
        return DialectCall(request=req, body=body, session=session, count=lambda n: {"totalTokens": n})

    # -- answers ---------------------------------------------------------------------
    @staticmethod
    def _response(call: DialectCall, candidate: dict[str, Any], completion_id: str) -> dict[str, Any]:
        return {"candidates": [{**candidate, "index": 0}], "modelVersion": call.state["model"],
                "responseId": completion_id}

    @staticmethod
    def _usage(usage: dict[str, Any]) -> dict[str, Any]:
        return {"promptTokenCount": usage["prompt_tokens"], "candidatesTokenCount": usage["completion_tokens"],
                "totalTokenCount": usage["total_tokens"]}

    @staticmethod
    def _parts(delta: dict[str, Any]) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        if delta.get("reasoning_content"):
            parts.append({"text": delta["reasoning_content"], "thought": True})
        if delta.get("content"):
            parts.append({"text": delta["content"]})
        for tc in delta.get("tool_calls") or []:
            fn = tc["function"]
            parts.append({"functionCall": {"id": tc["id"], "name": fn["name"], "args": _args_of(fn["arguments"])}})
        return parts

    def respond(self, call: DialectCall, completion: dict[str, Any]) -> dict[str, Any]:
        choice = completion["choices"][0]
        candidate = {"content": {"role": "model", "parts": self._parts(choice["message"])},
                     "finishReason": FINISH.get(choice["finish_reason"], "OTHER")}
        return {**self._response(call, candidate, completion["id"]), "usageMetadata": self._usage(completion["usage"])}

    async def events(self, call: DialectCall, chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
        finish = "OTHER"
        try:
            async for chunk in chunks:
                if not chunk["choices"]:  # the last one: usage, after the finish reason
                    candidate = {"content": {"role": "model", "parts": []}, "finishReason": finish}
                    yield sse({**self._response(call, candidate, chunk["id"]),
                               "usageMetadata": self._usage(chunk["usage"])})
                    continue
                choice = chunk["choices"][0]
                if choice["finish_reason"] is not None:
                    finish = FINISH.get(choice["finish_reason"], "OTHER")
                parts = self._parts(choice["delta"])
                if parts:
                    yield sse(self._response(call, {"content": {"role": "model", "parts": parts}}, chunk["id"]))
        except GatewayError as exc:
            yield sse(self.error_body(exc))

    def error_body(self, exc: GatewayError) -> dict[str, Any]:
        """Google's error shape (``google.rpc.Status``), with the gateway's own code as the ErrorInfo reason."""
        return {"error": {
            "code": exc.status_code,
            "message": str(exc),
            "status": STATUS.get(exc.status_code, "UNKNOWN"),
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": exc.code,
                         "domain": "tackroom-gateway"}],
        }}


GEMINI = GeminiDialect()
