"""Tasks a sandbox cannot run as they ask, refused by name before a run folder is claimed."""

from __future__ import annotations

import logging

from tackroom._config import NetworkDefaults
from tackroom._sandbox import SandboxProvider
from tackroom._task import Dataset, TaskLoadFailure, sandbox_refusal

log = logging.getLogger(__name__)


def refuse_unrunnable(dataset: Dataset, sandbox: SandboxProvider, network: NetworkDefaults | None = None) -> None:
    """Move each task ``sandbox`` cannot run as it asks (``tackroom._task.sandbox_refusal``: an allowlist or the
    internet it cannot give, an environment it cannot build) from ``dataset.tasks`` to ``dataset.failures``, with
    the reason: a task error named before the run, never a retried ``infra``. ``tackroom run``, ``tackroom
    matrix`` and ``tackroom train`` call it once, before they claim a run folder."""
    for task in list(dataset.tasks):
        if refused := sandbox_refusal(sandbox, task, network):
            dataset.tasks.remove(task)
            dataset.failures.append(TaskLoadFailure(path=task.path, message=refused))
    built = [t for t in dataset.tasks if t.dockerfile is not None]
    if built and "dockerfile" not in type(sandbox).capabilities:  # the capability's reader
        log.warning("%d task(s) have an environment/Dockerfile, which the %r sandbox does not build fully (it lacks the "
                    "'dockerfile' capability; its README says what it honours), e.g. %s", len(built), sandbox.name,
                    built[0].path.name)
