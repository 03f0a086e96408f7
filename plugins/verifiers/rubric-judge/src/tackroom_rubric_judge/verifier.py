"""The ``rubric-judge`` verifier: one structured judge verdict per rubric criterion."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Literal

from pydantic import ConfigDict, Field, SecretStr, model_validator

import tackroom
from tackroom.services import register_secret, register_url_secrets
from tackroom_file_diff import ChangesReport, FileChangeTracker, ReportLimits, expected_files, expected_outputs
from tackroom_rubric_judge.baseline import baseline_snapshot, task_settings
from tackroom_rubric_judge.client import JudgeClient, JudgeEndpoint, RetryPolicy, shared_client
from tackroom_rubric_judge.errors import JudgeAuthError, JudgeContextTooLongError
from tackroom_rubric_judge.plugin import RUBRIC_JUDGE
from tackroom_rubric_judge.prompt import build_messages, final_answer
from tackroom_rubric_judge.scoring import Criterion, CriterionResult, rubric_criteria, score
from tackroom_rubric_judge.transport import ChatRequest
from tackroom_rubric_judge.verdict import response_format

MODEL_ENV = "TACKROOM_JUDGE_MODEL"
BASE_URL_ENV = "TACKROOM_JUDGE_BASE_URL"


class JudgeRetryOptions(RetryPolicy):
    """``[verifier.retry]``."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class RubricJudgeOptions(tackroom.PluginOptions):
    """The ``[verifier]`` section when ``name = "rubric-judge"``."""

    model: str | None = Field(
        default=None,
        description=f"Judge model: a litellm name ('openai/gpt-4.1-mini', 'anthropic/…') or the name served at "
        f"base_url. Default ${MODEL_ENV}, else the first model base_url serves",
    )
    base_url: str | None = Field(
        default=None, description=f"OpenAI-compatible endpoint (…/v1), e.g. a local vLLM. Default ${BASE_URL_ENV}"
    )
    transport: Literal["auto", "openai", "litellm"] = Field(
        default="auto", description="'openai': httpx to base_url; 'litellm': any provider; auto: openai iff base_url"
    )
    api_keys: list[SecretStr] = Field(default_factory=list, description="Keys used round-robin")
    api_key_env: list[str] = Field(
        default_factory=list, description="Environment variables holding keys (comma-separated values allowed)"
    )
    score: Literal["mean", "all_pass"] = Field(default="mean", description="Which rubric score is the reward")
    max_concurrency: int = Field(
        default=32, ge=1, description="Judge requests in flight at once, shared by every trial in the process"
    )
    retry: JudgeRetryOptions = Field(default_factory=JudgeRetryOptions)
    max_tokens: int = Field(default=512, ge=16)
    temperature: float = Field(default=0.0, ge=0)
    structured_output: Literal["json_schema", "json_object", "none"] = Field(
        default="json_schema", description="response_format sent with each request"
    )
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Extra request fields (provider options)")
    system_prompt: str | None = Field(default=None, description="Replaces the built-in grader instructions")
    file_paths: list[str] = Field(
        default_factory=list, description="Sandbox paths whose changes the judge sees, besides task expected_outputs"
    )
    file_report: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="auto: show the file-diff report when the task has file outputs (expected_outputs or expected/)",
    )
    max_instruction_chars: int = Field(default=8000, ge=200)
    max_answer_chars: int = Field(default=8000, ge=200)
    max_report_chars: int = Field(default=8000, ge=200)
    context_shrinks: int = Field(
        default=2, ge=0, description="On 'context too long', halve the answer and report budgets this many times"
    )

    @model_validator(mode="after")
    def _endpoint(self) -> RubricJudgeOptions:
        if self.transport == "openai" and not (self.base_url or os.environ.get(BASE_URL_ENV)):
            raise ValueError(f"transport 'openai' needs base_url (or ${BASE_URL_ENV}), e.g. http://127.0.0.1:8000/v1")
        for key in self.api_keys:  # so that a key echoed back in an error body is masked in result.json
            register_secret(key)
        register_url_secrets(self.base_url)
        return self


class RubricJudgeVerifier(tackroom.Verifier, spec=RUBRIC_JUDGE):
    """Asks an LLM judge for a {rationale, passed} verdict per rubric criterion; reward = mean or all_pass.

    Components: ``criterion:<id>`` (1 when it holds), ``penalty:<id>`` (1 when
    the mistake happened), ``mean`` and ``all_pass``. A judge that stays down
    raises :class:`~tackroom_rubric_judge.errors.JudgeError` (an ``infra``
    error: the trial is retried, never scored 0).
    """

    Options = RubricJudgeOptions

    _tracker: FileChangeTracker | None = None

    # -- configuration ----------------------------------------------------------------
    def endpoint(self) -> JudgeEndpoint:
        o = self.options
        base_url = o.base_url or os.environ.get(BASE_URL_ENV) or None
        transport = o.transport if o.transport != "auto" else ("openai" if base_url else "litellm")
        register_url_secrets(base_url)
        keys = [k.get_secret_value() for k in o.api_keys]
        for name in o.api_key_env:
            value = os.environ.get(name)
            if not value:
                raise JudgeAuthError(f"api_key_env names ${name}, which is not set in the environment; export it")
            keys.extend(k.strip() for k in value.split(",") if k.strip())
        for key in keys:
            register_secret(key)
        return JudgeEndpoint(transport=transport, base_url=base_url, max_concurrency=o.max_concurrency,
                             keys=tuple(keys))

    def file_paths(self, task: tackroom.Task) -> list[str]:
        if self.options.file_report == "never":
            return []
        # File outputs: the task's expected_outputs, the files file-diff would grade (expected/), and ours.
        paths = [*expected_outputs(task), *expected_files(task, "expected"), *self.options.file_paths,
                 *task_settings(task).files]
        if self.options.file_report == "always" and not paths:
            paths = ["/app"]  # the Harbor convention's working directory
        return sorted(set(paths))

    # -- the two phases ---------------------------------------------------------------
    async def prepare(self, task: tackroom.Task, sandbox: tackroom.Sandbox) -> None:
        rubric_criteria(task)  # a task without a usable rubric fails before the agent runs
        paths = self.file_paths(task)
        if paths:
            self._tracker = FileChangeTracker(paths, limits=ReportLimits(max_chars=self.options.max_report_chars))
            await self._tracker.before(sandbox)
            settings = task_settings(task)
            if settings.baseline:  # those paths' state as the task gives it, not as the sandbox has it yet
                base = baseline_snapshot(task, settings, max_file_bytes=self._tracker.max_file_bytes)
                before = self._tracker.snapshot_before
                assert before is not None
                before.files = {k: v for k, v in before.files.items()
                                if not any(k == p or k.startswith(p.rstrip("/") + "/") for p in settings.baseline)}
                before.files.update(base.files)

    async def verify(self, task: tackroom.Task, sandbox: tackroom.Sandbox,
                     trajectory: tackroom.Trajectory) -> tackroom.Reward:
        criteria = rubric_criteria(task)
        report: ChangesReport | None = None
        paths = self.file_paths(task)
        if paths:
            tracker = self._tracker or FileChangeTracker(paths, limits=ReportLimits(max_chars=self.options.max_report_chars))
            report = await tracker.after(sandbox)
        client = shared_client(self.endpoint())
        model = await self.model_name(client)
        answer = final_answer(trajectory)
        jobs = [asyncio.ensure_future(self._judge(client, model, task, answer, report, c)) for c in criteria]
        try:
            results = list(await asyncio.gather(*jobs))
        except BaseException:
            # One criterion failed for good (or we were cancelled): the others are not worth waiting for.
            for job in jobs:
                job.cancel()
            await asyncio.gather(*jobs, return_exceptions=True)
            raise
        rubric = score(results)
        attempts = sum(r.call.attempts for r in results)
        retries: dict[str, int] = {}
        for r in results:
            for reason, n in r.call.retries.items():
                retries[reason] = retries.get(reason, 0) + n
        return tackroom.Reward(
            score=rubric.mean if self.options.score == "mean" else rubric.all_pass,
            components=rubric.components,
            details={
                "score_mode": self.options.score,
                "criteria": [r.model_dump(mode="json", exclude={"call": {"waits"}}) for r in results],
                "judge": {"model": model, "transport": client.endpoint.transport, "base_url": client.endpoint.shown_url,
                          "attempts": attempts, "retries": retries, "reasks": sum(r.call.reasks for r in results)},
                "files_report": report.to_text(self.options.max_report_chars) if report else None,
            },
        )

    async def model_name(self, client: JudgeClient) -> str:
        """The configured model, ``$TACKROOM_JUDGE_MODEL``, or the first model the endpoint serves."""
        name = self.options.model or os.environ.get(MODEL_ENV)
        if name:
            return name
        return await client.served_model(self.options.retry)

    async def _judge(self, client: JudgeClient, model: str, task: tackroom.Task, answer: str,
                     report: ChangesReport | None, criterion: Criterion) -> CriterionResult:
        o = self.options
        answer_budget, report_budget = o.max_answer_chars, o.max_report_chars
        for shrink in range(o.context_shrinks + 1):
            messages = build_messages(
                instruction=task.instruction, answer=answer, criterion=criterion.criterion,
                files_report=report.to_text(report_budget) if report is not None else None,
                system_prompt=o.system_prompt, max_answer_chars=answer_budget,
                max_instruction_chars=o.max_instruction_chars,
            )
            request = ChatRequest(model=model, messages=messages, max_tokens=o.max_tokens, temperature=o.temperature,
                                  response_format=response_format(o.structured_output), extra_body=o.extra_body)
            try:
                verdict, call = await client.verdict(request, o.retry)
            except JudgeContextTooLongError as exc:
                if shrink == o.context_shrinks:
                    raise JudgeContextTooLongError(
                        f"{exc} (also after shrinking the answer to {answer_budget} and the file report to "
                        f"{report_budget} characters); use a judge with a longer context or lower max_answer_chars"
                    ) from exc
                answer_budget, report_budget = max(answer_budget // 2, 200), max(report_budget // 2, 200)
                continue
            return CriterionResult(id=criterion.id, criterion=criterion.criterion, weight=criterion.weight,
                                   penalty=criterion.penalty, passed=verdict.passed, rationale=verdict.rationale,
                                   call=call)
        raise AssertionError("unreachable")
