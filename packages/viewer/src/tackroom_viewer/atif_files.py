"""``tackroom export atif`` and ``tackroom import atif``: run folders to ATIF files and back to trial folders."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import ValidationError

from tackroom import Trajectory
from tackroom_viewer.atif import AtifImportError, from_atif, to_atif
from tackroom_viewer.run_folders import TrialFolder, find_runs, read_json_object, read_regular


def _trials(folder: Path) -> list[TrialFolder]:
    if (folder / "trajectory.json").is_file():  # one trial folder
        return [TrialFolder(folder.resolve(), folder.name, "")]
    root = folder.resolve()
    return [t for run in find_runs(root) for t in run.trials(root)]


def export_run(run_dir: Path, out: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """One ``<trial key>.json`` per trial with a readable trajectory (``/`` of nested keys as ``__``); returns
    (written, skipped with why)."""
    written, skipped = [], []
    out.mkdir(parents=True, exist_ok=True)
    for trial in _trials(run_dir):
        raw = read_json_object(trial.path / "trajectory.json")
        if raw is None:
            skipped.append((trial.path, "no readable trajectory.json (being written?)"))
            continue
        try:
            trajectory = Trajectory.model_validate(raw)
        except ValidationError as exc:
            skipped.append((trial.path, f"trajectory.json is not a tackroom trajectory: {exc.errors()[0]['msg']}"))
            continue
        document = to_atif(trajectory, trial.result)
        target = out / (trial.key.replace("/", "__") + ".json")
        target.write_text(json.dumps(document, indent=2, ensure_ascii=False), encoding="utf-8")
        written.append(target)
    return written, skipped


def _folder_name(trial_id: str | None, fallback: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", trial_id or "").strip("-.")
    return name[:120] or re.sub(r"[^A-Za-z0-9_.-]+", "-", fallback).strip("-.")[:120] or "trial"


def _linked(path: Path, source: Path) -> bool:
    """Whether ``path`` or a folder between ``source`` and it is a symbolic link."""
    if path.is_symlink():
        return True
    if path == source:
        return False
    between = [source / p for p in path.relative_to(source).parents if p != Path(".")]
    return any(folder.is_symlink() for folder in between)


def import_files(source: Path, out: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Each ATIF file as ``<out>/<trial id>/trajectory.json`` (+ ``result.json`` where carried); returns
    (folders written, files not imported with why)."""
    files = sorted(source.rglob("*.json")) if source.is_dir() and not source.is_symlink() else [source]
    written, failed = [], []
    out.mkdir(parents=True, exist_ok=True)
    for path in files:
        if _linked(path, source):
            failed.append((path, "a symbolic link (or under one): only regular files inside the source are imported"))
            continue
        raw = read_regular(path)
        if raw is None:
            failed.append((path, "not a regular file that can be read (links, FIFOs and devices are not followed)"))
            continue
        try:
            document = json.loads(raw.decode("utf-8"))
        except RecursionError:
            failed.append((path, "JSON nested deeper than Python's parser takes: not an ATIF document"))
            continue
        except (ValueError, UnicodeDecodeError) as exc:
            failed.append((path, f"not JSON: {exc}"))
            continue
        if not isinstance(document, dict):
            failed.append((path, "not a JSON object"))
            continue
        try:
            trial = from_atif(document)
        except AtifImportError as exc:
            failed.append((path, str(exc)))
            continue
        except RecursionError:
            failed.append((path, "nested deeper than an ATIF document can be"))
            continue
        name = _folder_name(trial.trial_id, path.stem)
        folder, n = out / name, 1
        while folder.exists():
            n += 1
            folder = out / f"{name}-{n}"
        folder.mkdir()
        (folder / "trajectory.json").write_text(trial.trajectory.model_dump_json(indent=2), encoding="utf-8")
        if trial.result is not None:
            (folder / "result.json").write_text(json.dumps(trial.result, indent=2, ensure_ascii=False),
                                                encoding="utf-8")
        written.append(folder)
    return written, failed
