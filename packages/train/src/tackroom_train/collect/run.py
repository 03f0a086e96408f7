"""A collection: the task set × each harness × ``passes`` through the trial runtime against the teacher, then the
trials that passed turned into demonstrations.

The trials run as ``tackroom run`` runs them (the driver API: plugins by name, the trial runtime, the policy
routing that puts chat-only harnesses behind the policy gateway; any other harness reaches the teacher through
the recording proxy), into a fresh run folder under
``[runtime] out`` (a collection never resumes: the gateway's record of a trial exists only while it runs). A
trial is kept when it ended without an error (any class) and its reward is at least ``min_reward``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tackroom import ConfigError, Trial
from tackroom.services import redact, redact_url
from tackroom_app import (
    Endpoint,
    TrialPlugins,
    TrialRuntime,
    claim_run_dir,
    instantiate,
    load_dataset,
    policy_routing,
    refuse_unrunnable,
    unique_trials,
    wants_gateway,
)
from tackroom_train.collect.config import CollectConfig, HarnessRow, check_ready
from tackroom_train.collect.conversion import PolicySide, Routing, TrialEpisode, convert_trial
from tackroom_train.collect.recording import GatewayRecorder
from tackroom_train.collect.recording_proxy import ChatRecorder
from tackroom_train.collect.summary import CollectSummary, TrialVerdict
from tackroom_train.demonstrations import Demonstration, write_dataset

DEFAULT_TEACHER_TOKENIZER = "smollm2"
"""What the gateway renders with when ``[policy] tokenizer`` is unset (as in every run)."""


@dataclass
class HarnessPlan:
    """One harness row: its plugin, the trials' plugins, how it reaches the teacher, and the gateway's records."""

    row: HarnessRow
    harness: Any
    plugins: TrialPlugins
    routing: Routing
    same_tokenizer: bool
    recorder: GatewayRecorder | ChatRecorder | None = None


def load_policy_side(tokenizer: str, split: str = "train") -> PolicySide:
    """The policy's tokenizer and chat template; one that cannot load is a :class:`ConfigError` saying why."""
    from tackroom_gateway import ChatTemplate, load_tokenizer

    try:
        loaded = load_tokenizer(tokenizer)
        template = ChatTemplate(loaded)
    except Exception as exc:  # not a folder, no tokenizer.json, no chat template, a fetch that failed
        raise ConfigError(f"collect.tokenizer {tokenizer!r} cannot be loaded: {exc}\n(give smollm2, qwen3 or a "
                          "local tokenizer folder with tokenizer.json and a chat template)") from exc
    return PolicySide(tokenizer=tokenizer, template=template, vocab_size=len(loaded), split=split)


def same_tokenizer(a: str | None, b: str) -> bool:
    """Whether two tokenizer references name the same tokenizer (the same name, or the same folder)."""
    if a is None:
        return False
    if a == b:
        return True
    from tackroom_gateway import tokenizer_dir

    try:
        return tokenizer_dir(a).resolve() == tokenizer_dir(b).resolve()
    except Exception:  # one of them cannot be found: not provably the same
        return False


@contextlib.asynccontextmanager
async def teacher_endpoint(config: CollectConfig) -> AsyncIterator[Endpoint]:
    """``[policy]``, or, with ``teacher_script``, the scripted teacher served for the run (rendering in ``[policy]
    tokenizer``, default the policy's)."""
    script = config.collect.teacher_script
    if not script:
        yield config.policy
        return
    from tackroom_train.collect.teacher import serve_teacher, teacher_for

    tokenizer = config.policy.tokenizer or str(config.collect.tokenizer)
    teacher = teacher_for(script, tokenizer)
    async with serve_teacher(teacher) as url:
        yield config.policy.model_copy(update={"base_url": url, "model": teacher.model, "litellm": None,
                                               "tokenizer": tokenizer, "label": config.policy.label or "teacher"})


def plan_harness(index: int, row: HarnessRow, config: CollectConfig, endpoint: Endpoint, sandbox: Any,
                 verifier: Any, policy_tokenizer: str) -> HarnessPlan:
    where = f"collect.harnesses[{index}]" if config.collect.harnesses else "harness"
    harness = instantiate("harness", row.selection(), where=where)
    cls = type(harness)
    if "needs_policy" not in cls.capabilities:
        raise ConfigError(f"{where}: harness {row.name!r} calls no model (it lacks the needs_policy capability), so "
                          "it records no conversation to learn from; choose a harness that calls the teacher")
    teacher_tokenizer: str | None = None
    routing: Routing = "direct"
    if wants_gateway(endpoint, cls):
        routing, teacher_tokenizer = "gateway", endpoint.tokenizer or DEFAULT_TEACHER_TOKENIZER
    elif "token_ids" in cls.capabilities:
        own = getattr(harness.options, "tokenizer", None)
        routing = "token_ids"
        teacher_tokenizer = own if isinstance(own, str) and own else endpoint.tokenizer or DEFAULT_TEACHER_TOKENIZER
    plugins = TrialPlugins.from_instances(harness, sandbox, verifier, endpoint.policy(), harness_label=row.label)
    return HarnessPlan(row=row, harness=harness, plugins=plugins, routing=routing,
                       same_tokenizer=same_tokenizer(teacher_tokenizer, policy_tokenizer))


async def run_trials(config: CollectConfig, endpoint: Endpoint, policy_tokenizer: str, *,
                     progress: bool = True) -> tuple[Path, list[Any], list[HarnessPlan], list[Any]]:
    """Run every (harness, task, pass); returns the run folder, the outcomes, the plans and the tasks that failed
    to load."""
    sandbox = instantiate("sandbox", config.sandbox, where="sandbox")
    verifier = instantiate("verifier", config.verifier, where="verifier")
    dataset = load_dataset(config.tasks, include=config.include or None, exclude=config.exclude or None)
    if not dataset.tasks:
        detail = "; ".join(f.message for f in dataset.failures[:3])
        raise ConfigError(f"tasks: no task loaded from {', '.join(config.tasks)}" + (f" ({detail})" if detail else ""))
    refuse_unrunnable(dataset, sandbox, config.runtime.network)
    plans = [plan_harness(i, row, config, endpoint, sandbox, verifier, policy_tokenizer)
             for i, row in enumerate(config.harness_rows())]
    items = [(Trial.for_task(task, harness=plan.plugins.label, sandbox=sandbox.name, verifier=verifier.name,
                             model=plan.plugins.policy.display_name if plan.plugins.policy else None, pass_index=p),
              task, plan.plugins)
             for plan in plans for p in range(config.collect.passes) for task in dataset.tasks]
    unique_trials([trial for trial, _, _ in items])
    run_dir = claim_run_dir(config.runtime.out, config.runtime.run_id, force_new=True)
    runtime = TrialRuntime(
        run_dir, attempts=config.runtime.attempts, concurrency=config.runtime.concurrency,
        prepare_ahead=config.runtime.prepare_ahead, teardown_timeout_sec=config.runtime.teardown_timeout_sec,
        retry_backoff_sec=config.runtime.retry_backoff_sec, progress=progress, executor=config.runtime.executor,
        executor_options=config.runtime.executor_options(), network=config.runtime.network,
        force_build=config.runtime.force_build)
    async with contextlib.AsyncExitStack() as stack:
        for plan in plans:
            await stack.enter_async_context(policy_routing(endpoint, type(plan.harness), plan.plugins))
            if plan.plugins.policy_for is not None:  # the gateway's sessions: keep each trial's record
                plan.recorder = GatewayRecorder(plan.plugins.policy_for)
            else:  # straight to the teacher: through the recording proxy, for the messages and tools sent
                plan.recorder = await stack.enter_async_context(ChatRecorder(endpoint.endpoint, plan.plugins).serving())
            plan.plugins.policy_for = plan.recorder
        outcomes = await runtime.run_outcomes(items)
    return run_dir, outcomes, plans, dataset.failures


def judge(outcome: Any, plan: HarnessPlan, run_dir: Path, policy: PolicySide,
          min_reward: float) -> tuple[TrialVerdict, list[Demonstration]]:
    """Whether a trial is kept, and its demonstrations when it is."""
    r = outcome.result
    verdict = TrialVerdict(trial_id=r.trial_id, task=r.task, harness=r.harness, reward=r.reward,
                           error_class=r.error_class, error=f"{r.error.type}: {r.error.message}" if r.error else None)
    if r.error is not None:  # whatever the reward: an episode that ended in an error is not a demonstration
        verdict.reason = f"ended with an error of class {r.error.error_class} ({r.error.type})"
        return verdict, []
    if r.reward is None or r.reward < min_reward:
        verdict.reason = "no reward" if r.reward is None else f"reward {r.reward:.3g} is below min_reward {min_reward:g}"
        return verdict, []
    verdict.kept = True
    record = None
    if plan.recorder is not None and plan.recorder.readable:
        record = plan.recorder.records.get(r.trial_id)
    episode = TrialEpisode(task_id=r.task, harness=r.harness, reward=r.reward, source=str(run_dir / r.trial_id),
                           trajectory=outcome.trajectory, routing=plan.routing, same_tokenizer=plan.same_tokenizer,
                           record=record)
    conversion = convert_trial(episode, policy)
    verdict.demonstrations = len(conversion.demonstrations)
    verdict.trained_tokens = sum(d.trained_tokens for d in conversion.demonstrations)
    verdict.how, verdict.reason = conversion.how, conversion.reason
    return verdict, conversion.demonstrations


def summary_path(dataset: Path) -> Path:
    """Where the summary of a dataset goes: ``data.jsonl`` → ``data.summary.json``."""
    return dataset.with_name(f"{dataset.stem}.summary.json")


async def collect(config: CollectConfig, *, progress: bool = True,
                  policy: PolicySide | None = None) -> CollectSummary:
    """Run the collection ``config`` describes; write the dataset (when a trial gave a demonstration) and the
    summary beside it (always; also in the run folder as ``collect.json``). Refusals are :class:`ConfigError`."""
    check_ready(config)
    policy = policy or load_policy_side(str(config.collect.tokenizer), config.collect.split)
    out = Path(config.collect.out)
    async with teacher_endpoint(config) as endpoint:
        teacher = redact_url(endpoint.endpoint) if endpoint.configured else "(none)"
        if config.collect.teacher_script:
            teacher = f"{teacher}, the scripted teacher {config.collect.teacher_script}"
        run_dir, outcomes, plans, failures = await run_trials(config, endpoint, policy.tokenizer, progress=progress)
    by_label = {plan.plugins.label: plan for plan in plans}
    verdicts, rows = [], []
    for outcome in outcomes:
        verdict, demonstrations = judge(outcome, by_label[outcome.result.harness], run_dir, policy,
                                        config.collect.min_reward)
        verdicts.append(verdict)
        rows.extend(demonstrations)
    if rows:
        write_dataset(out, rows)
    summary = CollectSummary.of(
        verdicts, run_dir=str(run_dir), dataset=str(out) if rows else None, summary=str(summary_path(out)),
        tokenizer=policy.tokenizer, min_reward=config.collect.min_reward, teacher=teacher,
        task_load_failures=[{"path": str(f.path), "message": f.message} for f in failures])
    summary = CollectSummary.model_validate(redact(summary.model_dump(mode="json")))
    summary.write(summary_path(out))
    summary.write(run_dir / "collect.json")
    return summary
