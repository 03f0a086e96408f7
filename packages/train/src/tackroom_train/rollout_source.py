"""Where a run's rollouts come from: its own trial runtime (:class:`~tackroom_train.generator.TackroomGenerator`), or a
``tackroom serve`` when ``[rollout] service`` (``--rollouts``) names one
(:class:`~tackroom_train.remote_generator.RemoteGenerator`). Both backends pick their generator here; the remote one
(and tackroom-serve's client) is imported only when a service is named."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from tackroom import ConfigError
from tackroom_train.generator import TackroomGenerator
from tackroom_train.plan import RolloutSide


def run_key(run_dir: Path) -> str:
    """A run's identity in its service batches' idempotency keys: its folder's name and a digest of its whole path,
    the same when the run is started again with its ``--run-id`` (the same folder), and apart for two runs whose
    folders share a name (each ``[[arms]]`` arm's ``arms/<label>``)."""
    where = str(Path(run_dir).resolve())
    return f"{Path(run_dir).name}-{hashlib.sha256(where.encode()).hexdigest()[:10]}"


def service_settings(side: RolloutSide, *, run_id: str) -> Any:
    """``[rollout]``'s service settings (a :class:`~tackroom_train.remote_generator.ServiceSettings`), or None when the
    run's trials run in the trainer; a :class:`ConfigError` when tackroom-serve is not installed here."""
    if not side.rollout.service:
        return None
    try:
        from tackroom_train.remote_generator import ServiceSettings
    except ImportError as exc:
        raise ConfigError(f"--rollouts {side.rollout.service}: the trainer talks to the service through tackroom-serve's "
                          f"client, which is not installed here ({exc}); pip install tackroom-serve "
                          "(./packages/serve in the repository)") from exc
    return ServiceSettings.of(side.rollout, run_id=run_id)


def rollout_generator(side: RolloutSide, *, run_id: str, phase: str, base_url: str, tokenizer: Any = None,
                      model: str | None = None, run_root: str | Path | None = None, manager: Any = None,
                      service: Any = None) -> Any:
    """The run's generator for ``phase`` (``train``, ``preflight``): remote when ``[rollout] service`` is set (``run_id``
    and ``phase`` make its batches' idempotency keys; ``service``: its settings read before, where the token's
    variable is set), else the local one (``manager``: the plugins it resolves)."""
    service = service or service_settings(side, run_id=run_id)
    if service is None:
        return TackroomGenerator(side, base_url=base_url, tokenizer=tokenizer, model=model, run_root=run_root,
                                 manager=manager)
    from tackroom_train.remote_generator import RemoteGenerator

    return RemoteGenerator(side, service=service, base_url=base_url, tokenizer=tokenizer, model=model,
                           run_root=run_root, phase=phase)
