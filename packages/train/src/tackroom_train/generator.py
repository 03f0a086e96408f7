"""``TackroomGenerator``: SkyRL's ``GeneratorInterface`` with tackroom's trial runtime as the rollout engine.

Each prompt row is a task (``env_extras["task_path"]``); the rows sharing a
``TrajectoryID.instance_id`` are one group. A ``generate()`` call runs its
rows as trials (harness × sandbox × verifier against the inference
endpoint — directly for harnesses with their own token accounting
(``token_ids``), through one policy gateway for chat-only ones) into a fresh
run directory, then returns each trial's exact token ids split at the first
generated token, with loss masks, rollout logprobs, rewards, stop reasons and
the masking rules of :mod:`tackroom_train.masking` applied.

With ``[[harnesses]]`` each row names its harness (``env_extras["harness"]``, a label of the mix): the generator
builds one harness per label and runs each row under its own, each routed as it would be alone (a chat-only one
through the gateway, one with its own token accounting straight to the endpoint); the rollout metrics add each
harness's ``tackroom/harness/<label>/mean_reward``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from statistics import mean
from typing import Any

from skyrl.train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput, TrajectoryID

from tackroom import ConfigError, Policy, Task, Trajectory, Trial, TrialResult, load_task
from tackroom_app import TrialPlugins, TrialRuntime, gateway_sessions, instantiate, policy_gateway, wants_gateway
from tackroom_train.config import RolloutRules, TrainConfig
from tackroom_train.masking import RowOutcome, decide_group
from tackroom_train.mix import harness_metrics
from tackroom_train.plan import RolloutSide
from tackroom_train.tinker.datums import CONSTRAINED_KEY

TIMEOUT_STOP_REASONS = frozenset({"agent_timeout"})
TRUNCATED_STOP_REASONS = frozenset({"max_tokens", "length", "context_exhausted"})
"""Episode ends where the model was cut off at a token limit: a turn's ``max_tokens``, or the context."""


class RolloutRow:
    """One trial's outcome as the trainer sees it."""

    def __init__(self, result: TrialResult, trajectory: Trajectory) -> None:
        self.result = result
        self.trajectory = trajectory

    @property
    def timed_out(self) -> bool:
        err = self.result.error
        return self.trajectory.stop_reason in TIMEOUT_STOP_REASONS or (
            err is not None and err.type in ("AgentTimeoutError",))

    @property
    def truncated(self) -> bool:
        """The model was cut off when the episode ended: its last engine call stopped at ``max_tokens`` (the engine's
        ``finish_reason``, as the gateway recorded it: what SkyRL's filter reads) or the harness said so."""
        turns = self.trajectory.turns
        return bool(turns and turns[-1].finish_reason == "length") or self.trajectory.stop_reason in TRUNCATED_STOP_REASONS

    @property
    def first_generated(self) -> int | None:
        mask = self.trajectory.loss_mask
        return next((i for i, m in enumerate(mask) if m), None)

    def outcome(self) -> RowOutcome:
        return RowOutcome(error_class=self.result.error_class, timed_out=self.timed_out,
                          has_tokens=self.first_generated is not None, truncated=self.truncated,
                          reward=self.result.reward)


def split_tokens(trajectory: Trajectory) -> tuple[list[int], list[int], list[int], list[float] | None]:
    """(prompt ids, response ids, response loss mask, response logprobs) split at the first generated token."""
    first = next((i for i, m in enumerate(trajectory.loss_mask) if m), None)
    if first is None:
        raise ValueError("the trajectory has no generated token")
    ids, mask = trajectory.token_ids, trajectory.loss_mask
    logprobs = None if trajectory.logprobs is None else [float(x) for x in trajectory.logprobs[first:]]
    return list(ids[:first]), list(ids[first:]), [int(m) for m in mask[first:]], logprobs


def constrained_tokens(trajectory: Trajectory, first: int, length: int) -> list[int]:
    """1 at each response position (from ``first``, ``length`` of them) whose logprob the engine computed under a
    grammar (``TokenTurn.logprobs_constrained``: not the model's own, so the trainer uses its own there)."""
    flags = [0] * length
    last = max((t.branch for t in trajectory.turns), default=0)
    for turn in trajectory.turns:
        if turn.logprobs_constrained and turn.branch == last:
            start = len(turn.prompt_ids) - first
            for j in range(max(start, 0), min(start + len(turn.completion_ids), length)):
                flags[j] = 1
    return flags


def skyrl_sampling(sampling_params: dict[str, Any] | None) -> dict[str, Any]:
    """SkyRL's per-batch sampling params as OpenAI request fields for the harness's policy."""
    if not sampling_params:
        return {}
    out = {k: v for k, v in sampling_params.items() if k in ("temperature", "top_p", "top_k", "min_p", "stop")}
    length = sampling_params.get("max_generate_length", sampling_params.get("max_tokens"))
    if length is not None:
        out["max_tokens"] = int(length)
    if out.get("top_k") == -1:
        out.pop("top_k")
    return out


class TackroomGenerator(GeneratorInterface):
    """SkyRL generator running each prompt's group as tackroom trials (see the module docstring).

    ``base_url`` is the inference endpoint (OpenAI-compatible, ending in
    ``/v1``); ``tokenizer`` (SkyRL passes its HF tokenizer) renders the prompt
    of a row that left no tokens, so every row has a well-formed sequence. ``config`` is the plan's
    :class:`~tackroom_train.plan.RolloutSide`, or a whole train config, whose rollout side it takes.
    """

    def __init__(self, config: RolloutSide | TrainConfig, *, base_url: str, tokenizer: Any = None,
                 model: str | None = None, run_root: str | Path | None = None, manager: Any = None,
                 concurrency: int | None = None, retry_backoff_sec: float = 1.0) -> None:
        config = config if isinstance(config, RolloutSide) else RolloutSide.of(config)
        self.config = config
        self.base_url = base_url.rstrip("/")
        self.tokenizer = tokenizer
        self.model = model or config.served_name or "default"
        self.run_root = Path(run_root or config.rollout.out)
        self.manager = manager
        self.concurrency = concurrency
        self.retry_backoff_sec = retry_backoff_sec
        self.harnesses: dict[str | None, Any] = {
            label: instantiate("harness", selection, where="harness" if label is None else f"harness {label!r}",
                               manager=manager)
            for label, selection in config.harness_selections().items()}
        """Each harness by the label its rows name it with (``None``: the one ``[harness]``)."""
        self.harness = self.harnesses.get(None)
        """The one ``[harness]`` (None for a mix: see :attr:`harnesses`)."""
        self.sandbox = instantiate("sandbox", config.sandbox, where="sandbox", manager=manager)
        self.verifier = instantiate("verifier", config.verifier, where="verifier", manager=manager)
        self._tasks: dict[str, Task] = {}
        self._gateway_stack: contextlib.AsyncExitStack | None = None
        self._gateway: Any = None
        self._gateway_lock = asyncio.Lock()  # the fully-async trainer calls generate() from many workers at once
        self._calls = 0

    # -- routing ----------------------------------------------------------------------
    @property
    def uses_gateway(self) -> bool:
        """Whether any of the run's harnesses reaches the model through the policy gateway."""
        return any(self.wants_gateway(label) for label in self.harnesses)

    def wants_gateway(self, label: str | None = None) -> bool:
        """Whether the harness of ``label`` (None: the one ``[harness]``) goes through the gateway."""
        return wants_gateway(self.config.policy, type(self.harnesses[label]))

    async def _ensure_gateway(self) -> Any:
        if not self.uses_gateway or self._gateway is not None:
            return self._gateway
        async with self._gateway_lock:
            if self._gateway is None:
                await self._start_gateway()
        return self._gateway

    async def _start_gateway(self) -> None:
        # never a default vocabulary: the wrong tokenizer would corrupt every token id silently
        tokenizer = self.config.policy.tokenizer or self.config.model.tokenizer or self.config.model.path
        gateway = policy_gateway(base_url=self.base_url, model=self.model,
                                 api_key=self.config.policy.resolved_api_key(), tokenizer=tokenizer,
                                 manager=self.manager)
        stack = contextlib.AsyncExitStack()
        self._gateway = await stack.enter_async_context(gateway)
        self._gateway_stack = stack

    async def aclose(self) -> None:
        """Stop the policy gateway (if one was started)."""
        if self._gateway_stack is not None:
            await self._gateway_stack.aclose()
        self._gateway_stack, self._gateway = None, None

    def _plugins(self, sampling: dict[str, Any]) -> dict[str | None, TrialPlugins]:
        """Each harness's trial plugins by label; a harness that wants the gateway gets its sessions."""
        p = self.config.policy
        merged = {**p.sampling, **sampling}
        policy = Policy(base_url=self.base_url, model=self.model, api_key=p.resolved_api_key(),
                        tokenizer=p.tokenizer or self.config.model.tokenizer, sampling=merged, label=p.label)
        out = {}
        for label, harness in self.harnesses.items():
            plugins = TrialPlugins.from_instances(harness, self.sandbox, self.verifier, policy, harness_label=label)
            if self._gateway is not None and self.wants_gateway(label):
                plugins.policy_for = gateway_sessions(self._gateway, sampling=merged, label=p.label)
            out[label] = plugins
        return out

    def _route(self, plugins: dict[str | None, TrialPlugins], extras: dict[str, Any]) -> TrialPlugins:
        """The plugins of the harness a row names (``env_extras["harness"]``; none: the one ``[harness]``)."""
        label = extras.get("harness")
        if label not in plugins:
            known = ", ".join(repr(k) for k in plugins if k is not None)
            have = f"the mix's harnesses are {known}" if known else "this run has one [harness] and no mix"
            raise ConfigError(f"a prompt row asks for harness {label!r}: {have}; build the rows with "
                              "tackroom_train.plan.resolve_plan from the same config (tackroom train does)")
        return plugins[label]

    def _task(self, extras: dict[str, Any]) -> Task:
        path = extras.get("task_path")
        if not path:
            raise ConfigError("a prompt row has no env_extras['task_path']: build the dataset with "
                              "tackroom_train.dataset.prompt_rows (tackroom train does)")
        if path not in self._tasks:
            self._tasks[path] = load_task(path)
        return self._tasks[path]

    # -- generate ---------------------------------------------------------------------
    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        extras, ids, step = read_input(input_batch)
        n = len(extras)
        self._calls += 1
        run_dir = self.run_root / f"step{step:05d}-{self._calls:05d}-{uuid.uuid4().hex[:6]}"
        await self._ensure_gateway()
        by_label = self._plugins(skyrl_sampling(input_batch.get("sampling_params")))
        items = []
        for i, extra in enumerate(extras):
            task, plugins = self._task(extra), self._route(by_label, extra)
            trial = Trial.for_task(task, harness=plugins.label, sandbox=self.sandbox.name,
                                   verifier=self.verifier.name, model=self.model, pass_index=i)
            items.append((trial, task, plugins))
        runtime = TrialRuntime(run_dir, attempts=self.config.rollout.infra_attempts,
                               concurrency=min(n, self.concurrency or n), retry_backoff_sec=self.retry_backoff_sec,
                               prepare_ahead=min(self.config.rollout.prepare_ahead, max(n - (self.concurrency or n), 0)),
                               progress=False, manager=self.manager, executor=self.config.rollout.executor,
                               network=self.config.rollout.network)
        outcomes = await runtime.run_outcomes(items)
        rows = [RolloutRow(o.result, o.trajectory) for o in outcomes]
        return self._output(rows, ids, input_batch["prompts"], [e.get("harness") for e in extras])

    def _output(self, rows: list[RolloutRow], ids: list[TrajectoryID], prompts: list[Any],
                labels: list[str | None] | None = None) -> GeneratorOutput:
        return generator_output(rows, ids, prompts, labels, rules=self.config.rollout, tokenizer=self.tokenizer)


def placeholder_tokens(tokenizer: Any, prompt: Any) -> tuple[list[int], list[int]]:
    """Prompt ids and a one-token response for a row that left no tokens (fully masked)."""
    eos = getattr(tokenizer, "eos_token_id", None)
    eos = 0 if eos is None else int(eos)
    if tokenizer is None:
        return [eos], [eos]
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    return [int(x) for x in ids], [eos]


def generator_output(rows: list[RolloutRow], ids: list[TrajectoryID], prompts: list[Any],
                     labels: list[str | None] | None = None, *, rules: RolloutRules,
                     tokenizer: Any = None) -> GeneratorOutput:
    """Each trial's outcome (``rows``, in the input's order) as SkyRL's ``GeneratorOutput``, the masking rules of
    :mod:`tackroom_train.masking` applied per group (the rows sharing ``TrajectoryID.instance_id``): what
    :class:`TackroomGenerator` returns for its runtime's outcomes, and the remote generator
    (:mod:`tackroom_train.remote_generator`) for a service's. ``tokenizer`` renders the prompt of a row that left
    no tokens."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, tid in enumerate(ids):
        groups[tid.instance_id].append(i)
    decisions: dict[int, Any] = {}
    counts: Counter[str] = Counter()
    for members in groups.values():
        group = decide_group([rows[i].outcome() for i in members], rules.timeout_group_threshold,
                             overlong_filtering=rules.apply_overlong_filtering)
        counts.update(group.counts)
        decisions.update(zip(members, group.rows))

    prompt_ids, response_ids, loss_masks, logprobs, rewards, stops, times = [], [], [], [], [], [], []
    constrained: list[list[int]] = []
    logprobs_complete = True
    for i, row in enumerate(rows):
        d = decisions[i]
        if row.first_generated is not None:
            p, r, m, lp = split_tokens(row.trajectory)
            if lp is None:
                lp = [0.0] * len(r)
                logprobs_complete = logprobs_complete and d.masked
            constrained.append(constrained_tokens(row.trajectory, len(p), len(r)))
        else:
            p, r = placeholder_tokens(tokenizer, prompts[i])
            m, lp = [0] * len(r), [0.0] * len(r)
            constrained.append([0] * len(r))
        if d.masked:
            m = [0] * len(m)
        prompt_ids.append(p)
        response_ids.append(r)
        loss_masks.append(m)
        logprobs.append(lp)
        rewards.append(float(d.reward))
        stops.append("stop" if row.trajectory.stop_reason == "completed" else row.trajectory.stop_reason)
        times.append(float(row.result.timings.get("total", 0.0)))

    output = GeneratorOutput(
        prompt_token_ids=prompt_ids, response_ids=response_ids, rewards=rewards, loss_masks=loss_masks,
        stop_reasons=stops, rollout_metrics={**rollout_metrics(rows, decisions, counts),
                                             **harness_metrics(labels or [], rewards)},
        rollout_logprobs=logprobs if logprobs_complete else None, trajectory_ids=list(ids),
        trajectory_generation_times=times, trajectory_time_splits=None, rollout_expert_indices=None,
        rollout_sample_support=None, is_last_step=None, env_metrics=None, pixel_values=None, image_grid_thw=None,
    )
    # Always present, zeros when nothing was constrained: SkyRL's trainer passes extra list keys through and
    # concatenates groups by the first group's keys, so a key only some groups carry would break it.
    output[CONSTRAINED_KEY] = constrained  # type: ignore[literal-required]
    return output


def rollout_metrics(rows: list[RolloutRow], decisions: dict[int, Any], counts: Counter[str]) -> dict[str, Any]:
    """The ``tackroom/*`` rollout metrics of a batch's rows (see the package README)."""
    n = len(rows)
    graded = [r.result.reward for r in rows if r.result.reward is not None]
    metrics: dict[str, Any] = {
        "tackroom/trials": n,
        "tackroom/trained_trials": sum(1 for i in range(n) if not decisions[i].masked),
        "tackroom/masked_trials": sum(1 for i in range(n) if decisions[i].masked),
        "tackroom/mean_raw_reward": mean(graded) if graded else 0.0,
        "tackroom/retried_attempts": sum(len(r.result.previous_attempts) for r in rows),
    }
    for cls in ("infra", "model", "task"):
        metrics[f"tackroom/errors_{cls}"] = sum(1 for r in rows if r.result.error_class == cls)
    metrics["tackroom/timed_out"] = sum(1 for r in rows if r.timed_out)
    for key, value in counts.items():
        metrics[f"tackroom/{key}"] = value
    behaviour: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        for key, value in r.result.metrics.items():
            behaviour[key].append(float(value))
    for key, values in behaviour.items():
        metrics[f"tackroom/behaviour/{key}"] = mean(values)
    for reason, count in Counter(r.trajectory.stop_reason for r in rows).items():
        metrics[f"tackroom/stop/{reason}"] = count
    metrics.update(episode_metrics([r.trajectory for r in rows]))
    return metrics


def default_group(extras: dict[str, Any], index: int) -> str:
    """A row's group when the caller gives no trajectory ids: its task, under its harness in a mix."""
    task = str(extras.get("task_id", index))
    return f"{task}@{extras['harness']}" if extras.get("harness") is not None else task


def read_input(input_batch: GeneratorInput) -> tuple[list[dict[str, Any]], list[TrajectoryID], int]:
    """What every tackroom generator reads off a ``GeneratorInput``: each row's ``env_extras`` (``{}`` where none
    came), its trajectory id (by :func:`default_group` where none came) and the batch's global step (0: none)."""
    extras = input_batch.get("env_extras") or [{} for _ in range(len(input_batch["prompts"]))]
    ids = input_batch.get("trajectory_ids") or [
        TrajectoryID(instance_id=default_group(e, i), repetition_id=i) for i, e in enumerate(extras)]
    meta = input_batch.get("batch_metadata")
    return extras, ids, getattr(meta, "global_step", 0) if meta is not None else 0


def tool_calls(trajectory: Trajectory) -> float:
    """An episode's tool calls: the harness's ``tool_calls`` metric, terminus's ``commands_sent`` (its shell
    is its tool), else the assistant messages' ``tool_calls`` in the transcript."""
    for key in ("tool_calls", "commands_sent"):
        if key in trajectory.metrics:
            return float(trajectory.metrics[key])
    return float(sum(len(m.get("tool_calls") or []) for m in trajectory.messages if m.get("role") == "assistant"))


def episode_metrics(trajectories: list[Trajectory]) -> dict[str, Any]:
    """Per-episode means over a batch: ``tackroom/episode/turns`` (engine calls; the harness's ``turns`` where
    no token turns were recorded), ``tackroom/episode/tool_calls`` and, where the harness reports it,
    ``tackroom/episode/tool_call_success``; with policy versions on the turns, the oldest and newest version any
    token was sampled under (a turn cut at a weight update and continued has one per token) and the turns that
    spanned versions (ints)."""
    if not trajectories:
        return {}
    turns = [float(len(t.turns)) if t.turns else float(t.metrics.get("turns", 0.0)) for t in trajectories]
    out = {"tackroom/episode/turns": mean(turns),
           "tackroom/episode/tool_calls": mean(tool_calls(t) for t in trajectories)}
    rates = [t.metrics["tool_call_success_rate"] for t in trajectories
             if "tool_call_success_rate" in t.metrics and t.metrics.get("tool_calls")]
    if rates:
        out["tackroom/episode/tool_call_success"] = mean(rates)
    turns = [turn for t in trajectories for turn in t.turns if turn.policy_version is not None or turn.token_versions]
    if turns:  # the policy versions the engine sampled the batch's tokens with (a trainer's proxy, or the gateway)
        versions = [v for turn in turns for v in (turn.token_versions or [turn.policy_version])]
        out["tackroom/turn_version_min"], out["tackroom/turn_version_max"] = min(versions), max(versions)
        out["tackroom/turns_with_version"] = len(turns)
        out["tackroom/turns_across_versions"] = sum(1 for turn in turns if len(set(turn.token_versions or [])) > 1)
    return out


def run_generate(generator: TackroomGenerator, input_batch: GeneratorInput) -> GeneratorOutput:
    """``generate`` from synchronous code (tests, scripts)."""
    return asyncio.run(generator.generate(input_batch))
