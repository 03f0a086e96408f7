"""``RemoteGenerator``: SkyRL's ``GeneratorInterface`` with a ``tackroom serve`` as the rollout engine
(``tackroom train --rollouts URL``, ``[rollout] service``).

The trainer runs no trial itself. A ``generate()`` call's rows (a step's prompt rows × samples) become service
batches, one per harness (the one ``[harness]``, or each label of a ``[[harnesses]]`` mix) and samples per task: a
``tackroom run`` config of the rows' task folders with the run's sandbox, verifier and rollout rules, the trainer's
sampling endpoint as its ``[policy]`` (the service calls it, so it must reach it: ``[rollout] service_policy_url``)
and the policy version the rows sample with. Each batch is created under an idempotency key made of the run id,
the phase, the step and what it asks, so a trainer restarted with the same ``--run-id`` re-attaches to the batches
it had created instead of doubling them. Results stream back as they finish; each rollout's latest attempt (the service
retries ``infra`` failures up to ``[rollout] infra_attempts``) becomes the :class:`~tackroom_train.generator.RolloutRow`
the local path builds from its runtime's outcome, and :func:`~tackroom_train.generator.generator_output` turns the
rows into SkyRL's output under the same masking rules. A copy of each result and trajectory is written to
``<run_root>/stepNNNNN-<call>-<batch id>/<trial id>/``, as the local path writes its trials.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, SecretStr
from skyrl.train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput, TrajectoryID

from tackroom import ConfigError, InfraError, TackroomError, Trajectory, TrialResult
from tackroom.services import register_secret
from tackroom_app import RunConfig, RuntimeConfig, TrialErrorInfo
from tackroom_serve.client import AsyncServeClient, ServeError
from tackroom_serve.models import BatchView, Health, Outcome, RolloutView
from tackroom_train.config import RolloutRules, TrainConfig
from tackroom_train.dataset import POLICY_VERSION_EXTRA
from tackroom_train.generator import RolloutRow, generator_output, read_input, skyrl_sampling
from tackroom_train.plan import RolloutSide

CREATE_TRIES = 3
"""Tries to create a batch while the service cannot be reached (safe to repeat: the idempotency key)."""


class RolloutServiceError(InfraError):
    """The rollout service failed the trainer mid-run: unreachable after retries, or an error answer."""


class ServiceSettings(BaseModel):
    """Where a run's rollouts run (``[rollout] service``) and what its batches carry."""

    model_config = ConfigDict(frozen=True)

    url: str
    token: SecretStr
    token_env: str
    """The environment variable the token came from (named in errors)."""
    run_id: str
    """The run's identity (:func:`~tackroom_train.rollout_source.run_key`): the first part of every batch's
    idempotency key."""
    policy_url: str | None = None
    """``[rollout] service_policy_url``: the sampling endpoint as the service reaches it."""
    tasks_root: str | None = None
    """``[rollout] service_tasks_root``: task paths under it are sent relative to it."""

    @classmethod
    def of(cls, rules: RolloutRules, *, run_id: str) -> ServiceSettings:
        """``[rollout]``'s service settings, the token read from its environment variable (a :class:`ConfigError`
        when it is not set)."""
        if not rules.service:
            raise ConfigError("rollout.service: no rollout service is set (--rollouts URL)")
        url = rules.service.rstrip("/")
        if rules.prepare_ahead:
            raise ConfigError(f"rollout.prepare_ahead: the rollout service at {url} does not prepare trials ahead "
                              "yet; leave it at 0 with --rollouts")
        token = os.environ.get(rules.service_token_env)
        if not token:
            raise ConfigError(f"--rollouts {url}: the service's token is read from ${rules.service_token_env}, which "
                              "is not set; export the token `tackroom serve` printed (or one of its --tokens file), "
                              "or name another variable with [rollout] service_token_env")
        register_secret(token)
        return cls(url=url, token=SecretStr(token), token_env=rules.service_token_env, run_id=run_id,
                   policy_url=rules.service_policy_url, tasks_root=rules.service_tasks_root)

    def client(self) -> AsyncServeClient:
        return AsyncServeClient(self.url, self.token.get_secret_value(), timeout=60.0)

    def task_path(self, path: str) -> str:
        """A task's path as the batch names it: relative to :attr:`tasks_root` when set, else as given."""
        if self.tasks_root is None:
            return path
        try:
            return Path(path).resolve().relative_to(Path(self.tasks_root).resolve()).as_posix()
        except ValueError:
            raise ConfigError(f"rollout.service_tasks_root: task {path} is not under {self.tasks_root}; set it to a "
                              "folder that holds every training task (the one the service's --tasks-root mirrors)"
                              ) from None


def service_error(settings: ServiceSettings, exc: ServeError, doing: str) -> TackroomError:
    """An error answer of the service as the trainer's error: what the config can fix is a :class:`ConfigError`."""
    where = f"the rollout service at {settings.url}"
    if exc.status in (401, 403):
        return ConfigError(f"{where} refused the token from ${settings.token_env} ({exc.status} {exc.code}): export "
                           "the token `tackroom serve` printed, or one of its --tokens file")
    if exc.status == 409 and exc.code == "idempotency_key_reused":
        return ConfigError(f"{where}: {exc.message}. This run's step was submitted before with other settings (the "
                           "config or the sampling endpoint changed since): start it as a new run (--run-id)")
    if exc.status in (400, 413, 422):
        return ConfigError(f"{where} refused {doing} ({exc.status} {exc.code}): {exc.message}")
    return RolloutServiceError(f"{where} failed {doing} ({exc.status} {exc.code}): {exc.message}")


async def checked(client: AsyncServeClient, settings: ServiceSettings) -> Health:
    """That a tackroom serve answers at the URL and takes the token; a :class:`ConfigError` naming the URL if not."""
    try:
        health = await client.health()
    except httpx.TransportError as exc:
        raise ConfigError(f"no tackroom serve answers at {settings.url} ({type(exc).__name__}: {exc}); start "
                          "`tackroom serve` there, or fix --rollouts / [rollout] service") from exc
    except ServeError as exc:
        raise ConfigError(f"{settings.url} does not answer as a tackroom serve ({exc}); check --rollouts / "
                          "[rollout] service") from exc
    try:
        await client.list_batches(limit=1)
    except httpx.TransportError as exc:
        raise ConfigError(f"the rollout service at {settings.url} stopped answering ({exc})") from exc
    except ServeError as exc:
        raise service_error(settings, exc, "the first request") from exc
    return health


async def check_service(settings: ServiceSettings) -> Health:
    """:func:`checked` with a client of its own: run before anything of a run starts."""
    async with settings.client() as client:
        return await checked(client, settings)


class ServiceBatch(BaseModel):
    """One batch a ``generate()`` call asks the service for: one harness (``label``; None: the one ``[harness]``),
    ``tasks`` × ``samples``, and the input row each rollout fills (``rows[t][s]``: task ``t``'s sample ``s``)."""

    label: str | None
    tasks: list[str]
    samples: int
    rows: list[list[int]]


def plan_batches(extras: list[dict[str, Any]]) -> list[ServiceBatch]:
    """The rows (``env_extras``) as service batches: by harness, tasks that have the same number of rows together
    (a batch is tasks × samples), each task's rows its samples in input order."""
    by_task: dict[tuple[str | None, str], list[int]] = {}
    for i, extra in enumerate(extras):
        if not extra.get("task_path"):
            raise ConfigError("a prompt row has no env_extras['task_path']: build the dataset with "
                              "tackroom_train.dataset.prompt_rows (tackroom train does)")
        by_task.setdefault((extra.get("harness"), str(extra["task_path"])), []).append(i)
    batches: dict[tuple[str | None, int], ServiceBatch] = {}
    for (label, path), rows in by_task.items():
        batch = batches.setdefault((label, len(rows)), ServiceBatch(label=label, tasks=[], samples=len(rows), rows=[]))
        batch.tasks.append(path)
        batch.rows.append(rows)
    return list(batches.values())


def policy_version(extras: list[dict[str, Any]], metadata: Any) -> int | None:
    """The version the rows sample with: theirs (``POLICY_VERSION_EXTRA``), else the batch's ``global_step``."""
    versions = {extra.get(POLICY_VERSION_EXTRA) for extra in extras} - {None}
    if len(versions) == 1:
        return int(versions.pop())
    step = getattr(metadata, "global_step", None)
    return None if step is None else int(step)


def rollout_row(outcome: Outcome | None, rollout: RolloutView, config: RunConfig) -> RolloutRow:
    """A rollout's latest attempt as the local path's :class:`RolloutRow`: the trial's ``result.json`` and trajectory
    as the service recorded them. An attempt that ended outside the trial runtime (cancelled, interrupted, the
    service's own failure), or none, is an ``infra`` failure without reward, which the masking rules drop."""
    trajectory = outcome.trajectory if outcome is not None and outcome.trajectory is not None else Trajectory()
    if outcome is not None and outcome.result:
        return RolloutRow(TrialResult.model_validate(outcome.result), trajectory)
    error = outcome.error if outcome is not None else None
    if error is None:
        how = f"ended {outcome.state} ({'; '.join(outcome.notes) or 'no note'})" if outcome else "has no attempt"
        error = TrialErrorInfo.model_validate({"class": "infra", "type": "RolloutNotRun", "phase": "service",
                                               "message": f"rollout {rollout.id} {how} on the service"})
    result = TrialResult(trial_id=rollout.trial_id, task=rollout.task_id, harness=config.harness.name,
                         sandbox=config.sandbox.name, verifier=config.verifier.name, pass_index=rollout.sample,
                         attempt=outcome.attempt if outcome is not None else rollout.attempt, error=error,
                         notes=list(outcome.notes) if outcome is not None else [])
    return RolloutRow(result, trajectory)


def write_copy(folder: Path, row: RolloutRow) -> None:
    """``<folder>/<trial id>/result.json`` and ``trajectory.json``, as a run folder holds a trial."""
    trial = folder / row.result.trial_id
    trial.mkdir(parents=True, exist_ok=True)
    (trial / "result.json").write_text(json.dumps(row.result.dump(), indent=2))
    (trial / "trajectory.json").write_text(row.trajectory.model_dump_json(indent=2))


class RemoteGenerator(GeneratorInterface):
    """SkyRL generator whose trials run on a ``tackroom serve`` (see the module docstring).

    ``base_url`` is the trainer's sampling endpoint (the batches carry ``service.policy_url`` instead when set);
    ``tokenizer`` renders the prompt of a row that left no tokens, as :class:`TackroomGenerator`'s does; ``phase``
    (``train``, ``preflight``) keeps the idempotency keys of a run's passes apart. :attr:`batch_ids` lists the service
    batches it created or re-attached to, in order."""

    def __init__(self, config: RolloutSide | TrainConfig, *, service: ServiceSettings, base_url: str,
                 tokenizer: Any = None, model: str | None = None, run_root: str | Path | None = None,
                 phase: str = "train", retry_backoff_sec: float = 1.0) -> None:
        config = config if isinstance(config, RolloutSide) else RolloutSide.of(config)
        self.config = config
        self.service = service
        self.policy_url = (service.policy_url or base_url).rstrip("/")
        self.tokenizer = tokenizer
        self.model = model or config.served_name or "default"
        self.run_root = Path(run_root or config.rollout.out)
        self.phase = phase
        self.retry_backoff_sec = retry_backoff_sec
        self.batch_ids: list[str] = []
        self._keys: Counter[str] = Counter()
        self._checked = False
        self._calls = 0

    async def aclose(self) -> None:
        """Nothing to stop (each call holds its own connection); here for the loop, as on the local generator."""

    def batch_config(self, batch: ServiceBatch, sampling: dict[str, Any]) -> RunConfig:
        """The ``tackroom run`` config of ``batch``: its tasks, its harness, the run's sandbox, verifier and rollout
        rules, and the trainer's endpoint with the call's sampling merged over ``[policy] sampling``."""
        side, rules = self.config, self.config.rollout
        selections = side.harness_selections()
        if batch.label not in selections:
            known = ", ".join(repr(k) for k in selections if k is not None)
            have = f"the mix's harnesses are {known}" if known else "this run has one [harness] and no mix"
            raise ConfigError(f"a prompt row asks for harness {batch.label!r}: {have}; build the rows with "
                              "tackroom_train.plan.resolve_plan from the same config (tackroom train does)")
        p = side.policy
        policy = p.model_copy(update={
            "base_url": self.policy_url, "model": self.model, "sampling": {**p.sampling, **sampling},
            "tokenizer": p.tokenizer or side.model.tokenizer or side.model.path})
        total = len(batch.tasks) * batch.samples
        runtime = RuntimeConfig(attempts=rules.infra_attempts, concurrency=min(total, rules.max_concurrency or total),
                                executor=rules.executor, network=rules.network,
                                retry_backoff_sec=self.retry_backoff_sec)
        return RunConfig(tasks=[self.service.task_path(t) for t in batch.tasks], harness=selections[batch.label],
                         sandbox=side.sandbox, verifier=side.verifier, policy=policy, runtime=runtime)

    def idempotency_key(self, step: int, batch: ServiceBatch, ids: list[TrajectoryID], config: RunConfig,
                        version: int | None) -> str:
        """The run id, the phase, the step and a digest of what is asked (the rows, the config with the sampling
        endpoint, the policy version): a trainer restarted with the same ``--run-id`` meets the same keys in the same
        order; asked otherwise (its endpoint moved, the config changed) it makes a new batch, since the old one's
        rollouts would call an endpoint that is gone. A repeat within this generator (a group drawn again in the
        same step) counts up."""
        rows = [[(ids[i].instance_id, ids[i].repetition_id) for i in task] for task in batch.rows]
        asked = [batch.label, batch.tasks, batch.samples, rows, config.model_dump(mode="json"), version]
        digest = hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()
        base = f"{self.phase}/step{step:05d}/{digest[:24]}"
        self._keys[base] += 1
        return f"tackroom-train/{self.service.run_id[:120]}/{base}/{self._keys[base] - 1}"

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        extras, ids, step = read_input(input_batch)
        meta = input_batch.get("batch_metadata")
        self._calls += 1
        sampling = skyrl_sampling(input_batch.get("sampling_params"))
        version = policy_version(extras, meta)
        asked = []
        for batch in plan_batches(extras):
            config = self.batch_config(batch, sampling)
            asked.append((batch, config, self.idempotency_key(step, batch, ids, config, version)))
        folder = self.run_root / f"step{step:05d}-{self._calls:05d}"
        async with self.service.client() as client:
            if not self._checked:
                await checked(client, self.service)
                self._checked = True
            runs = [asyncio.ensure_future(self._run_batch(client, *one, version, folder)) for one in asked]
            try:
                found = await asyncio.gather(*runs)
            except BaseException:
                for run in runs:
                    run.cancel()
                await asyncio.gather(*runs, return_exceptions=True)
                raise
        rows = {i: row for part in found for i, row in part.items()}
        return generator_output([rows[i] for i in range(len(extras))], ids, input_batch["prompts"],
                                [e.get("harness") for e in extras], rules=self.config.rollout,
                                tokenizer=self.tokenizer)

    async def _run_batch(self, client: AsyncServeClient, batch: ServiceBatch, config: RunConfig, key: str,
                         version: int | None, folder: Path) -> dict[int, RolloutRow]:
        """Create (or re-attach to) the batch, follow its results to the end, and return each input row's rollout."""
        view = await self._create(client, config, batch.samples, version, key)
        self.batch_ids.append(view.id)
        slots = await self._slots(client, view, batch)
        latest: dict[str, Outcome] = {}
        try:
            async for outcome in client.results(view.id):
                latest[outcome.rollout_id] = outcome  # in event order: the last one is the rollout's latest attempt
        except httpx.TransportError as exc:
            raise RolloutServiceError(f"the rollout service at {self.service.url} stopped streaming batch {view.id}'s "
                                      f"results ({type(exc).__name__}: {exc})") from exc
        except ServeError as exc:
            raise service_error(self.service, exc, f"batch {view.id}'s results") from exc
        rows = {}
        for rollout in slots.values():
            row = rollout_row(latest.get(rollout.id), rollout, config)
            write_copy(folder.with_name(f"{folder.name}-{view.id}"), row)
            t, s = divmod(rollout.position, batch.samples)
            rows[batch.rows[t][s]] = row
        return rows

    async def _create(self, client: AsyncServeClient, config: RunConfig, samples: int, version: int | None,
                      key: str) -> BatchView:
        failure: Exception | None = None
        for attempt in range(CREATE_TRIES):
            try:
                return await client.create_batch(config, samples=samples, policy_version=version,
                                                 idempotency_key=key, metadata={"run": self.service.run_id,
                                                                                "phase": self.phase})
            except httpx.TransportError as exc:
                failure = exc
                await asyncio.sleep(self.retry_backoff_sec * 2 ** attempt)
            except ServeError as exc:
                raise service_error(self.service, exc, f"the batch {key}") from exc
        raise RolloutServiceError(f"the rollout service at {self.service.url} did not answer creating the batch {key} "
                                  f"({type(failure).__name__}: {failure}; {CREATE_TRIES} tries)")

    async def _slots(self, client: AsyncServeClient, view: BatchView, batch: ServiceBatch) -> dict[str, RolloutView]:
        """The batch's rollouts by id; every task the trainer sent must have loaded on the service."""
        where = f"the rollout service at {self.service.url}"
        if view.task_load_failures:
            problems = "; ".join(f"{f.path}: {f.message}" for f in view.task_load_failures)
            with contextlib.suppress(httpx.TransportError, ServeError):  # its other tasks would run for nothing
                await client.cancel_batch(view.id)
            raise ConfigError(f"{where} could not load tasks the trainer trains on ({problems}); it reads task paths "
                              "on its own machine (see [rollout] service_tasks_root)")
        try:
            rollouts = await client.list_rollouts(view.id)
        except httpx.TransportError as exc:
            raise RolloutServiceError(f"{where} did not list batch {view.id}'s rollouts ({exc})") from exc
        except ServeError as exc:
            raise service_error(self.service, exc, f"batch {view.id}'s rollouts") from exc
        if len(rollouts) != len(batch.tasks) * batch.samples:
            raise RolloutServiceError(f"{where}: batch {view.id} holds {len(rollouts)} rollouts, not the "
                                      f"{len(batch.tasks)} tasks × {batch.samples} samples asked for")
        return {r.id: r for r in rollouts}
