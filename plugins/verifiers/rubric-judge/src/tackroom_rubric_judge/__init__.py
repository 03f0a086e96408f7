"""tackroom-rubric-judge: grade each rubric criterion with an LLM judge.

- :class:`RubricJudgeVerifier` (``rubric-judge``): the verifier plugin.
- :func:`shared_client` / :class:`JudgeClient`: the per-process judge client
  (concurrency limit, retries, key rotation, stats) other verifiers may reuse.
- :mod:`tackroom_rubric_judge.testing`: ``MisbehavingJudgeServerForTests``, an
  OpenAI-compatible server that fails on cue, for your own reliability tests.
"""

from tackroom_rubric_judge.client import (
    CallRecord,
    JudgeClient,
    JudgeEndpoint,
    JudgeStats,
    RetryPolicy,
    close_shared_clients,
    shared_client,
    shared_clients,
)
from tackroom_rubric_judge.errors import (
    JudgeAuthError,
    JudgeBadRequestError,
    JudgeContextTooLongError,
    JudgeError,
    JudgeInvalidOutputError,
    JudgeUnavailableError,
)
from tackroom_rubric_judge.prompt import build_messages, final_answer
from tackroom_rubric_judge.scoring import CriterionResult, RubricScore, rubric_criteria, score
from tackroom_rubric_judge.transport import ChatReply, ChatRequest, LitellmTransport, OpenAICompatibleTransport
from tackroom_rubric_judge.verdict import VERDICT_SCHEMA, Verdict, parse_verdict
from tackroom_rubric_judge.verifier import RubricJudgeOptions, RubricJudgeVerifier

__all__ = [
    "VERDICT_SCHEMA",
    "CallRecord",
    "ChatReply",
    "ChatRequest",
    "CriterionResult",
    "JudgeAuthError",
    "JudgeBadRequestError",
    "JudgeClient",
    "JudgeContextTooLongError",
    "JudgeEndpoint",
    "JudgeError",
    "JudgeInvalidOutputError",
    "JudgeStats",
    "JudgeUnavailableError",
    "LitellmTransport",
    "OpenAICompatibleTransport",
    "RetryPolicy",
    "RubricJudgeOptions",
    "RubricJudgeVerifier",
    "RubricScore",
    "Verdict",
    "build_messages",
    "close_shared_clients",
    "final_answer",
    "parse_verdict",
    "rubric_criteria",
    "score",
    "shared_client",
    "shared_clients",
]
