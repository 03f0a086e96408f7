"""tackroom-rubric-judge: grade each rubric criterion with an LLM judge.

- :class:`RubricJudgeVerifier` (``rubric-judge``): the verifier plugin.
- :func:`shared_client` / :class:`JudgeClient`: the per-process judge client
  (concurrency limit, retries, key rotation, stats) other verifiers may reuse.
- :mod:`tackroom_rubric_judge.testing`: ``MisbehavingJudgeServerForTests``, an
  OpenAI-compatible server that fails on cue, for your own reliability tests.

The entry point (:mod:`tackroom_rubric_judge.plugin`) registers the verifier by reference and this package
imports its modules on first access: every ``tackroom`` command loads every installed plugin's registration,
and the judge's client imports httpx (~0.4 s of CPU here).
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "CallRecord": "tackroom_rubric_judge.client",
    "ChatReply": "tackroom_rubric_judge.transport",
    "ChatRequest": "tackroom_rubric_judge.transport",
    "CriterionResult": "tackroom_rubric_judge.scoring",
    "JudgeAuthError": "tackroom_rubric_judge.errors",
    "JudgeBadRequestError": "tackroom_rubric_judge.errors",
    "JudgeClient": "tackroom_rubric_judge.client",
    "JudgeContextTooLongError": "tackroom_rubric_judge.errors",
    "JudgeEndpoint": "tackroom_rubric_judge.client",
    "JudgeError": "tackroom_rubric_judge.errors",
    "JudgeInvalidOutputError": "tackroom_rubric_judge.errors",
    "JudgeStats": "tackroom_rubric_judge.client",
    "JudgeUnavailableError": "tackroom_rubric_judge.errors",
    "LitellmTransport": "tackroom_rubric_judge.transport",
    "OpenAICompatibleTransport": "tackroom_rubric_judge.transport",
    "RetryPolicy": "tackroom_rubric_judge.client",
    "RubricJudgeOptions": "tackroom_rubric_judge.verifier",
    "RubricCriterion": "tackroom_rubric_judge.rubric",
    "RubricJudgeVerifier": "tackroom_rubric_judge.verifier",
    "RubricScore": "tackroom_rubric_judge.scoring",
    "VERDICT_SCHEMA": "tackroom_rubric_judge.verdict",
    "Verdict": "tackroom_rubric_judge.verdict",
    "build_messages": "tackroom_rubric_judge.prompt",
    "close_shared_clients": "tackroom_rubric_judge.client",
    "final_answer": "tackroom_rubric_judge.prompt",
    "parse_verdict": "tackroom_rubric_judge.verdict",
    "rubric_criteria": "tackroom_rubric_judge.scoring",
    "score": "tackroom_rubric_judge.scoring",
    "shared_client": "tackroom_rubric_judge.client",
    "shared_clients": "tackroom_rubric_judge.client",
    "task_rubric": "tackroom_rubric_judge.rubric",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'tackroom_rubric_judge' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
