"""tackroom-rubric-judge: grade each rubric criterion with an LLM judge.

- :class:`RubricJudgeVerifier` (``rubric-judge``): the verifier plugin.
- :func:`shared_client` / :class:`JudgeClient`: the per-process judge client
  (concurrency limit, retries, key rotation, stats) other verifiers may reuse.
- :mod:`tackroom_rubric_judge.testing`: ``MisbehavingJudgeServerForTests``, an
  OpenAI-compatible server that fails on cue, for your own reliability tests.

The entry point (:mod:`tackroom_rubric_judge.plugin`) registers the verifier by reference and this package
imports its modules on first access: every ``tackroom`` command loads every installed plugin's registration,
and the judge's client imports httpx, which a command that never grades with a judge should not pay for.
"""

from __future__ import annotations

import tackroom

_EXPORTS = tackroom.LazyExports(__name__, {
    "tackroom_rubric_judge.client": [
        "CallRecord", "JudgeClient", "JudgeEndpoint", "JudgeStats", "RetryPolicy", "close_shared_clients",
        "shared_client", "shared_clients"],
    "tackroom_rubric_judge.errors": [
        "JudgeAuthError", "JudgeBadRequestError", "JudgeContextTooLongError", "JudgeError",
        "JudgeInvalidOutputError", "JudgeUnavailableError"],
    "tackroom_rubric_judge.prompt": ["build_messages", "final_answer"],
    "tackroom_rubric_judge.rubric": ["RubricCriterion", "task_rubric"],
    "tackroom_rubric_judge.scoring": ["CriterionResult", "RubricScore", "rubric_criteria", "score"],
    "tackroom_rubric_judge.transport": ["ChatReply", "ChatRequest", "LitellmTransport", "OpenAICompatibleTransport"],
    "tackroom_rubric_judge.verdict": ["VERDICT_SCHEMA", "Verdict", "parse_verdict"],
    "tackroom_rubric_judge.verifier": ["RubricJudgeOptions", "RubricJudgeVerifier"],
})
__getattr__, __dir__, __all__ = _EXPORTS.getattr, _EXPORTS.dir, _EXPORTS.names
