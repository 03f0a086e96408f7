"""Every request and response of the service's HTTP API, as pydantic models: the server validates with them, the
client parses with them, and /openapi.json is built from them. A request model forbids fields it does not define,
so a misspelt field is a 422 that lists the valid ones."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from tackroom import Trajectory
from tackroom_app import RunConfig, TrialErrorInfo

RolloutState = Literal["queued", "running", "completed", "failed", "cancelled", "interrupted"]
"""``completed``: a result the trainer can use (no error, or the model's own); ``failed``: an ``infra`` or ``task``
error (no reward); ``cancelled`` by a client; ``interrupted``: the service stopped while it ran."""
ROLLOUT_STATES: tuple[str, ...] = RolloutState.__args__  # type: ignore[attr-defined]
TERMINAL_STATES = ("completed", "failed", "cancelled", "interrupted")
BatchState = Literal["active", "paused", "cancelled"]
ErrorClassName = Literal["infra", "model", "task"]


def plain_json(value: Any) -> Any:
    """A model dump (``mode="python"``) as JSON values, credentials revealed: what a client sends, once, over its
    connection (a ``SecretStr`` dumps as ``**********`` in JSON mode)."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, BaseModel):
        return plain_json(value.model_dump(mode="python", by_alias=True))
    if isinstance(value, dict):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain_json(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)  # paths and the like


class Strict(BaseModel):
    """A request body: unknown fields are refused (the 422 lists the valid ones)."""

    model_config = ConfigDict(extra="forbid")


# -- requests --------------------------------------------------------------------------------------------
class BatchCreate(Strict):
    """``POST /v1/batches``: every task of ``config`` × ``samples`` rollouts, run as ``tackroom run`` would run
    ``config`` (its harness, sandbox, verifier, policy endpoint and ``[runtime]`` rules). Relative task paths
    resolve against the service's ``--tasks-root``; ``runtime.out`` and ``runtime.run_id`` are the service's."""

    config: RunConfig
    samples: int = Field(default=1, ge=1, le=10_000)
    """Rollouts per task (sample ``i`` is the trial's pass ``i``: its own trial id)."""
    policy_version: int | None = None
    """Recorded on each rollout when it starts (``resume`` sets a new one)."""
    metadata: dict[str, str] = Field(default_factory=dict)


class NoBody(Strict):
    """An action without parameters: send nothing or ``{}``."""


PauseMode = Literal["drain", "finish", "continue"]


class PauseRequest(Strict):
    """``POST /v1/batches/{id}/pause``: start no more trials; ``model_calls`` says what the running ones do.

    ``drain``: they go on as before (their model calls too) and finish. ``finish`` and ``continue`` are for a
    weight update: the batch's policy gateway holds every model call not yet on the engine until the resume, and
    those on it complete on the old weights (``finish``; the pause answers once they have) or are cut and, after the
    resume, continued from what they sampled on the new weights (``continue``). Each token records the version it
    was sampled under. A harness that calls the engine itself, not through the gateway, drains."""

    model_calls: PauseMode = "drain"


class ResumeRequest(Strict):
    """``POST /v1/batches/{id}/resume``: start trials again; rollouts started from now on record ``policy_version``
    (left out: the batch's current one), and model calls held by a pause go on, their tokens tagged with it."""

    policy_version: int | None = None


class RetryBatchRequest(Strict):
    """``POST /v1/batches/{id}/retry``: queue again, as a new attempt, every finished rollout whose error is of
    these classes (``interrupted`` rollouts count as ``infra``)."""

    error_classes: list[ErrorClassName] = Field(default_factory=lambda: ["infra"], min_length=1)


class SqlRequest(Strict):
    """``POST /v1/sql``: one SELECT, run in a read-only transaction; at most ``max_rows`` rows come back."""

    query: str = Field(min_length=1, max_length=100_000)
    max_rows: int = Field(default=1000, ge=1, le=10_000)
    timeout_sec: float = Field(default=5.0, gt=0, le=60)


class BatchQuery(Strict):
    """``GET /v1/batches`` query parameters: newest first; ``before`` is the ``seq`` of the last batch seen."""

    state: BatchState | None = None
    limit: int = Field(default=100, ge=1, le=1000)
    before: int | None = None


class RolloutQuery(Strict):
    """``GET /v1/batches/{id}/rollouts`` query parameters: in batch order; ``after`` is the last ``position`` seen."""

    state: RolloutState | None = None
    limit: int = Field(default=500, ge=1, le=5000)
    after: int = -1
    trajectory: bool = False


class RolloutGetQuery(Strict):
    """``GET /v1/rollouts/{id}`` query parameters."""

    trajectory: bool = True


class ResultsQuery(Strict):
    """``GET /v1/batches/{id}/results`` query parameters: events after this id (``Last-Event-ID`` wins)."""

    after: int = 0
    trajectory: bool = True


# -- responses -------------------------------------------------------------------------------------------
class Outcome(BaseModel):
    """One finished attempt of a rollout: an event of the batch's results stream (``event_id`` is its SSE id)."""

    event_id: int
    rollout_id: str
    batch_id: str
    task_id: str
    sample: int
    trial_id: str
    attempt: int
    state: RolloutState
    policy_version: int | None = None
    """The batch's policy version when this attempt started (each turn's own is in ``trajectory.turns``)."""
    reward: float | None = None
    error_class: ErrorClassName | None = None
    error: TrialErrorInfo | None = None
    notes: list[str] = Field(default_factory=list)
    result: dict[str, Any] = Field(default_factory=dict)
    """The trial's whole ``result.json`` (components, timings, metrics, earlier attempts' errors)."""
    trajectory: Trajectory | None = None
    """Token ids, loss mask, logprobs and turns (left out where the request asked for no trajectory)."""
    finished_at: str


class RolloutView(BaseModel):
    """A rollout: one (task, sample) of a batch, its state and its latest finished attempt."""

    id: str
    batch_id: str
    position: int
    """Its place in the batch: tasks in order, each task's samples together."""
    task_id: str
    task_path: str
    trial_id: str
    sample: int
    state: RolloutState
    attempt: int
    policy_version: int | None = None
    created_at: str
    started_at: str | None = None
    outcome: Outcome | None = None


class TaskLoadProblem(BaseModel):
    path: str
    message: str


class BatchView(BaseModel):
    """A batch, with its rollouts counted by state; ``done`` once none is queued or running."""

    id: str
    seq: int
    client: str
    state: BatchState
    done: bool
    policy_version: int | None = None
    samples: int
    total: int
    counts: dict[str, int]
    concurrency: int
    idempotency_key: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    config: dict[str, Any]
    """The run config as given (credentials masked)."""
    task_load_failures: list[TaskLoadProblem] = Field(default_factory=list)
    created_at: str
    updated_at: str


class BatchList(BaseModel):
    batches: list[BatchView]


class RolloutList(BaseModel):
    rollouts: list[RolloutView]


class RetryResult(BaseModel):
    retried: list[str]
    """The ids of the rollouts queued again."""
    batch: BatchView


class SqlResult(BaseModel):
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    """More rows matched than ``max_rows``."""


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    database: str
    """The dialect (``sqlite``, ``postgresql``)."""
    running: int


class FieldProblem(BaseModel):
    path: str
    message: str
    valid_fields: list[str] | None = None
    """Where the field is unknown: the fields that exist there."""


class ErrorDetail(BaseModel):
    code: str
    message: str
    errors: list[FieldProblem] = Field(default_factory=list)


class ErrorBody(BaseModel):
    """Every error answer: ``{"error": {"code", "message", "errors"}}``."""

    error: ErrorDetail
