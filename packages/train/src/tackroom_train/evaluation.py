"""``[eval]``: serve a trained policy with ``tackroom model up``'s engine and evaluate it through the matrix's Python API.

- :func:`serve` starts one vLLM engine for a model folder on ``[eval] port`` and always stops it (also
  when the evaluation fails or is interrupted); it refuses a port where an engine already runs, so it
  never stops an engine it did not start.
- :func:`evaluate` runs a :class:`tackroom_matrix.MatrixConfig` of that one model × the ``[eval]``
  harness rows × ``passes`` into ``<out>/eval/`` and returns one :class:`~tackroom_train.arms.EvalRow`
  per cell (pass@1 mean ± std over passes, mean reward ± std, turns, assistant tokens per turn,
  tool-call success, as the matrix computes them).
- :func:`check_eval` resolves the rows, sandbox and verifier before any training starts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from tackroom import ConfigError
from tackroom_train.arms import EvalRow, EvalSection
from tackroom_train.config import TrainConfig

PLACEHOLDER_URL = "http://127.0.0.1:9/v1"


def _selection(data: dict[str, Any] | None, default: Any) -> dict[str, Any]:
    if data is None:
        return {"name": default.name, **(default.model_extra or {})}
    if "name" not in data:
        raise ConfigError(f"eval: a sandbox/verifier table needs a name, got {data}")
    return dict(data)


def eval_harnesses(config: TrainConfig) -> list[dict[str, Any]]:
    """The ``[eval]`` harness rows as the matrix takes them: ``[[eval.harnesses]]`` when given, else what the run
    trained on: every harness of a ``[[harnesses]]`` mix (its label and options), or the one ``[harness]``."""
    section = config.eval or EvalSection()
    if section.harnesses:
        return [h.model_dump(exclude_none=True) for h in section.harnesses]
    if config.harnesses:
        return [{"name": h.name, "label": h.row_label, "options": h.options} for h in config.harnesses]
    return [{"name": config.harness.name, "options": dict(config.harness.model_extra or {})}]


def matrix_config(config: TrainConfig, label: str, base_url: str, served: str) -> Any:
    """The matrix the ``[eval]`` section describes for one served model."""
    from tackroom_matrix import parse_matrix_config

    section = config.eval or EvalSection()
    harnesses = eval_harnesses(config)
    data = {
        "title": f"eval {label}",
        "tasks": section.tasks or config.tasks,
        "include": section.include or config.include, "exclude": section.exclude or config.exclude,
        "models": [{"label": label, "base_url": base_url, "model": served,
                    "tokenizer": config.policy.tokenizer or config.model.tokenizer, "sampling": section.sampling}],
        "harnesses": harnesses,
        "sandbox": _selection(section.sandbox, config.sandbox),
        "verifier": _selection(section.verifier, config.verifier),
        "passes": section.passes, "pass_threshold": section.pass_threshold,
        "require_models": True,
        "runtime": {"concurrency": section.concurrency},
    }
    return parse_matrix_config(data, source="[eval]")


def check_eval(config: TrainConfig, manager: Any = None) -> None:
    """Resolve the ``[eval]`` harness rows (their options), sandbox and verifier; a ConfigError before training."""
    from tackroom_matrix.config import resolve_plugins

    resolve_plugins(matrix_config(config, "check", PLACEHOLDER_URL, "check"), manager)


def row_from_cell(cell: Any, passes: int, matrix_dir: Path | None = None) -> EvalRow:
    b = cell.behaviour
    return EvalRow(model=str(cell.model or "-"), harness=cell.harness, passes=passes, n_trials=cell.n_trials,
                   n_counted=cell.n_counted, pass_at_1=cell.pass_at_1, pass_at_1_std=cell.pass_at_1_std,
                   mean_reward=cell.mean_reward, reward_std=cell.std, turns=b.get("turns"),
                   assistant_tokens_per_turn=b.get("assistant_tokens_per_turn"),
                   tool_call_success_rate=b.get("tool_call_success_rate"),
                   non_model_error_rate=cell.non_model_error_rate,
                   matrix_dir=str(matrix_dir) if matrix_dir else None)


async def evaluate(config: TrainConfig, label: str, base_url: str, served: str, out: Path,
                   log: Callable[[str], None] = print, manager: Any = None) -> list[EvalRow]:
    """Evaluate the model at ``base_url`` (served as ``served``) into ``<out>/eval/``; one row per cell."""
    from tackroom_matrix import build_report, run_matrix, write_reports

    matrix = matrix_config(config, label, base_url, served)
    outcome = await run_matrix(matrix, manager=manager, progress=False, out=out, run_id="eval", on_notice=log)
    write_reports(build_report(outcome), outcome.run_dir)
    return [row_from_cell(c, matrix.passes, outcome.run_dir) for c in outcome.cells]


@contextlib.asynccontextmanager
async def serve(model: str | None, name: str, config: TrainConfig,
                log: Callable[[str], None] = print) -> AsyncIterator[str]:
    """Serve ``model`` (a folder; None: the converted SmolLM2 with tackroom's template) as ``name`` on
    ``[eval] port``; yields its base URL and stops the engine on the way out, whatever happened."""
    from tackroom_engine.engine import EngineSettings, down, read_state, status, up

    section = config.eval or EvalSection()
    port = section.port
    if status(port)["running"]:
        raise ConfigError(f"[eval] port {port} already has an engine (`tackroom model status`); stop it or set "
                          "[eval] port to a free one: the evaluation starts and stops its own engine there")
    settings = EngineSettings(port=port, model=model, served_name=name, max_model_len=section.max_model_len,
                              kv_cache_gib=section.kv_cache_gib,
                              start_timeout_sec=section.start_timeout_s)
    log(f"serving {model or 'the base model'} as {name!r} on port {port}")
    starting = asyncio.ensure_future(asyncio.to_thread(up, settings, log))
    try:
        state = await asyncio.shield(starting)
        yield state.base_url
    finally:
        # interrupted while the engine starts: let up() finish (or fail) first, so no engine is left behind
        with contextlib.suppress(BaseException):
            await asyncio.shield(starting)
        if read_state(port) is not None:
            await asyncio.shield(asyncio.to_thread(down, port))
            log(f"stopped the engine on port {port}")
