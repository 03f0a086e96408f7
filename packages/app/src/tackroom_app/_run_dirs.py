"""Run folders and run identity (``tackroom run``, ``matrix``, ``train``): claiming a folder no other run holds,
and refusing a resume whose setup differs from the one that made the folder's results, with the changes."""

from __future__ import annotations

import json
import secrets
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from tackroom._config import check_run_id
from tackroom._errors import ConfigError


def validated_run_id(run_id: str, what: str = "--run-id") -> str:
    """``run_id`` if it is a plain name (no path separators, no ``..``); a :class:`ConfigError` naming ``what``."""
    try:
        return check_run_id(run_id, what=what)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def claim_run_dir(out: str | Path, run_id: str | None, *, force_new: bool = False) -> Path:
    """The run directory to use, created.

    A named run (``run_id``) is that folder (resumed when it exists) unless ``force_new``
    and it is already in use, then ``<run_id>-<time>-<random>`` beside it. Without a name a
    fresh ``<time>-<random>`` folder is claimed atomically (never one another run holds).
    """
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    if run_id is not None:
        validated_run_id(run_id)
        named = root / run_id
        used = named.exists() and (not named.is_dir() or any(named.iterdir()))
        if not force_new or not used:
            named.mkdir(exist_ok=True)
            return named
    for _ in range(100):  # the time plus a random suffix: two runs in one second differ
        stamp = f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        candidate = root / (f"{run_id}-{stamp}" if run_id else stamp)
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise ConfigError(f"{root}: could not create a new run folder")  # pragma: no cover - 100 random collisions


def has_results(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds any trial's ``result.json`` (a run to resume, not a fresh one)."""
    return run_dir.is_dir() and any(run_dir.glob("*/result.json"))


_MISSING = object()


def _show(value: Any) -> str:
    return "(not set)" if value is _MISSING else json.dumps(value, sort_keys=True, default=str)


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """``dotted.path: was X, now Y`` for every leaf that differs."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            a, b = old.get(key, _MISSING), new.get(key, _MISSING)
            if a != b:
                out += differences(a, b, f"{path}.{key}" if path else str(key))
        return out
    return [f"{path or '(value)'}: was {_show(old)}, now {_show(new)}"]


def tasks_fingerprint(tasks: list[Any]) -> dict[str, Any]:
    """Each task's content hash, keyed by its resolved path."""
    return {str(t.path): {"id": t.id, "hash": t.source_hash} for t in tasks}


def task_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Tasks in both fingerprints whose content changed (added or left-out tasks are fine)."""
    out = []
    for path, now in new.items():
        before = old.get(path)
        if isinstance(before, dict) and before.get("hash") != now.get("hash"):
            out.append(f"task {now.get('id')!r} ({path}): its content changed since the run's results were made "
                       f"(hash {str(before.get('hash'))[:12]} → {str(now.get('hash'))[:12]})")
    return out


def fingerprint_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    problems = []
    if old.get("version") != new.get("version"):
        problems.append(f"fingerprint version: was {old.get('version')}, now {new.get('version')}")
    for part in ("harness", "sandbox", "verifier", "policy"):
        if old.get(part, _MISSING) != new.get(part):
            problems += differences(old.get(part, _MISSING), new.get(part), part)
    if old.get("network") != new.get("network"):  # absent: the default network (tasks that declare none: offline)
        problems.append(f"network of tasks that declare none: was {old.get('network') or 'offline'}, now "
                        f"{new.get('network') or 'offline'}")
    problems += task_changes(old.get("tasks") or {}, new.get("tasks") or {})
    return problems


def refuse_changed(run_dir: Path, problems: list[str]) -> ConfigError:
    return ConfigError(
        f"{run_dir} holds results made with a different setup:\n  " + "\n  ".join(problems)
        + "\nResuming would mix them with new ones. Start a new run instead (--force-new, or another --run-id), "
        "or delete the folder to discard the old results."
    )


def unique_trials(trials: list[Any], where: str = "tasks") -> None:
    """Two trials with one id would share a result folder: refuse (a hostile label or task set)."""
    counts = Counter(t.id for t in trials)
    dupes = [tid for tid, n in counts.items() if n > 1]
    if dupes:
        raise ConfigError(f"{where}: these trial ids would be shared by more than one trial, so their results "
                          f"would mix: {', '.join(dupes[:5])}; rename a task or label")
