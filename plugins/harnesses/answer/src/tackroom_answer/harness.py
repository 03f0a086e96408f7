"""The ``answer`` harness: one chat completion, no tools (Inspect AI's plain ``generate()``).

The task instruction goes to the model as the user message (after an optional
system prompt); the reply is written to a file in the sandbox (``/app/answer.txt``
by default) for the verifier to grade, and recorded as the trajectory.

It speaks only chat completions (capability ``chat``): next to tackroom-gateway,
``tackroom run`` and ``tackroom matrix`` route it through the policy gateway,
which records the exact token ids of the one turn; without it, it chats
straight to the endpoint (the trajectory then has no token ids).

Failures, as the trial runtime classifies them:

- unreachable endpoint, timeout, HTTP 5xx/429 (after ``attempts`` tries), HTTP
  401/403/404 (a wrong base URL, model or key) or a body that is not JSON:
  :class:`AnswerEndpointError` (``infra``, the trial is retried);
- any other HTTP 4xx (context length exceeded, a bad sampling parameter) or a
  completion with no choices or no text content: :class:`AnswerModelError`
  (``model``, the trial counts with what the sandbox holds).

Registered by reference (:mod:`tackroom_answer`): loading the plugins does not import this module or httpx.
"""

from __future__ import annotations

import posixpath
import shlex
import time
from typing import Any

import httpx
from pydantic import Field
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from tackroom import (
    Harness,
    InfraError,
    ModelError,
    PluginOptions,
    Policy,
    Sandbox,
    Task,
    Trajectory,
)
from tackroom.services import openai_error_message as _error_message
from tackroom_answer.spec import ANSWER
from tackroom_worlds import task_answer_path

_CONTEXT_MARKERS = ("context_length_exceeded", "maximum context length", "context length", "max_model_len",
                    "too many tokens")
_CONFIG_STATUS = (401, 403, 404)
"""Answers that mean the endpoint, model or key is wrong: machinery, not the policy's failure."""


class AnswerEndpointError(InfraError):
    """The model endpoint could not be reached or did not answer properly; the trial is retried."""


class AnswerModelError(ModelError):
    """The model refused the request (HTTP 4xx, e.g. context length) or answered no text; counts as the policy's."""


class _Retryable(Exception):
    """A failure worth another try (connection, timeout, 5xx, 429)."""


class AnswerOptions(PluginOptions):
    system: str | None = Field(
        default=None, description="System prompt sent before the instruction (none by default)")
    max_tokens: int = Field(
        default=256, ge=1, description="max_tokens of the request, unless the policy's sampling sets one")
    strip: bool = Field(
        default=True, description="Strip leading and trailing whitespace from the reply before writing it")
    answer_path: str = Field(
        default="/app/answer.txt", min_length=1, description="Sandbox file the reply is written to (parents created)")
    timeout_sec: float = Field(default=120.0, gt=0, description="Timeout of one model request")
    attempts: int = Field(
        default=3, ge=1, le=10, description="Tries of the request on connection errors, timeouts, 5xx and 429")


class AnswerHarness(Harness, spec=ANSWER):
    """Asks the model once (chat completions, no tools) and writes its reply to a file in the sandbox."""

    Options = AnswerOptions

    retry_backoff_sec: float = 0.5
    """Base of the exponential backoff between tries (0.5 s, 1 s, 2 s …, at most 4 s)."""

    async def run(self, task: Task, sandbox: Sandbox, policy: Policy | None) -> Trajectory:
        if policy is None:
            raise InfraError("the answer harness calls a model but was given no policy; set [policy] base_url "
                             "(or --base-url) to an OpenAI-compatible endpoint, e.g. the one `tackroom model up` prints")
        o = self.options
        answer_path = task_answer_path(task, o.answer_path) or o.answer_path  # the task's [answer] path wins
        messages: list[dict[str, Any]] = []
        if o.system:
            messages.append({"role": "system", "content": o.system})
        messages.append({"role": "user", "content": task.instruction})
        url = f"{policy.base_url.rstrip('/')}/chat/completions"
        body: dict[str, Any] = dict(policy.sampling)
        if body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
            body["max_tokens"] = o.max_tokens
        body.update({"model": policy.model, "messages": messages, "stream": False})

        t0 = time.monotonic()
        try:
            data = await self._complete(url, body, policy.api_key)
            content, finish_reason = _reply(data, url)
        except ModelError as exc:
            exc.trajectory = Trajectory(  # type: ignore[attr-defined]  the runtime keeps what was asked
                messages=messages, stop_reason=getattr(exc, "stop_reason", "model_error"),
                metrics={"turns": 1.0}, notes=[f"answer: {exc}"[:500]],
            )
            raise
        seconds = time.monotonic() - t0

        answer = content.strip() if o.strip else content
        parent = posixpath.dirname(answer_path)
        if parent and parent != "/":
            made = await sandbox.exec(f"mkdir -p {shlex.quote(parent)}", timeout=60)
            if not made.ok:
                raise InfraError(f"could not create {parent} in the sandbox for the answer: "
                                 f"{(made.stderr or made.stdout).strip()[:500]}")
        await sandbox.write_file(answer_path, answer)

        metrics = {"turns": 1.0, "model_time_s": round(seconds, 4)}
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        if isinstance(usage.get("completion_tokens"), int):
            metrics["assistant_tokens_per_turn"] = float(usage["completion_tokens"])
        if isinstance(usage.get("prompt_tokens"), int):
            metrics["prompt_tokens"] = float(usage["prompt_tokens"])
        truncated = finish_reason == "length"
        limit = body.get("max_tokens") or body.get("max_completion_tokens")
        return Trajectory(
            messages=[*messages, {"role": "assistant", "content": content}],
            final_answer=answer,
            stop_reason="max_tokens" if truncated else "completed",
            metrics=metrics,
            notes=[f"answer: the reply was cut at max_tokens ({limit})"] if truncated else [],
        )

    async def _complete(self, url: str, body: dict[str, Any], api_key: str) -> dict[str, Any]:
        """POST the request (retrying what is worth retrying) and return the JSON body of a 2xx answer."""
        o = self.options
        timeout = httpx.Timeout(o.timeout_sec, connect=min(10.0, o.timeout_sec))
        async with httpx.AsyncClient(timeout=timeout, headers={"Authorization": f"Bearer {api_key}"}) as client:
            try:
                async for attempt in AsyncRetrying(
                    stop=stop_after_attempt(o.attempts),
                    wait=wait_exponential(multiplier=self.retry_backoff_sec, max=4),
                    retry=retry_if_exception_type(_Retryable),
                    reraise=True,
                ):
                    with attempt:
                        response = await _post(client, url, body)
            except _Retryable as exc:
                raise AnswerEndpointError(
                    f"{exc} (after {o.attempts} attempt{'s' if o.attempts > 1 else ''}); is the model server up? "
                    "(`tackroom model status`, or check [policy] base_url)"
                ) from exc
        status = response.status_code
        if status >= 400:
            message, code = _error_message(response)
            if status in _CONFIG_STATUS:
                raise AnswerEndpointError(f"{url} answered HTTP {status}: {message}; check [policy] base_url "
                                          "(it ends in /v1), model and api_key")
            error = AnswerModelError(f"the model endpoint {url} rejected the request (HTTP {status}): {message}")
            low = f"{code} {message}".lower()
            if any(m in low for m in _CONTEXT_MARKERS):
                error.stop_reason = "context_exhausted"  # type: ignore[attr-defined]
            raise error
        try:
            data = response.json()
        except ValueError as exc:
            raise AnswerEndpointError(f"{url} answered HTTP {status} with a body that is not JSON: "
                                      f"{response.text[:300]!r}") from exc
        if not isinstance(data, dict):
            raise AnswerModelError(f"{url} answered {str(data)[:300]!r}, not a chat completion object")
        return data


async def _post(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> httpx.Response:
    try:
        response = await client.post(url, json=body)
    except httpx.TimeoutException as exc:
        raise _Retryable(f"no answer from {url} in time ({type(exc).__name__})") from exc
    except httpx.TransportError as exc:
        raise _Retryable(f"cannot reach the model at {url}: {type(exc).__name__}: {exc}") from exc
    if response.status_code >= 500 or response.status_code == 429:
        message, _ = _error_message(response)
        raise _Retryable(f"{url} answered HTTP {response.status_code}: {message}")
    return response


def _reply(data: dict[str, Any], url: str) -> tuple[str, str | None]:
    """(content, finish_reason) of the first choice; :class:`AnswerModelError` when there is no text."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise AnswerModelError(f"{url} answered a completion with no choices: {str(data)[:300]!r}")
    choice = choices[0]
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):  # content parts: keep the text ones
        texts = [p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        content = "".join(texts) if texts else None
    if not isinstance(content, str):
        raise AnswerModelError(f"{url} answered a completion with no text content: {str(choice)[:300]!r}")
    finish = choice.get("finish_reason")
    return content, finish if isinstance(finish, str) else None
