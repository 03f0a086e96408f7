"""tackroom-ray: the ``ray`` executor (``[runtime] executor = "ray"``, options in ``[runtime.ray]``).

Registered lazily: importing this package (which every ``tackroom`` command
does through its entry point) imports neither Ray nor the executor module;
both are imported when a run selects the ``ray`` executor.
"""

from __future__ import annotations

from tackroom import Registrar, hookimpl
from tackroom_ray.errors import AttemptDeadlineError, PluginNotShippableError, WorkerLostError
from tackroom_ray.options import RayOptions

tackroom_contract = 2
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@hookimpl
def tackroom_executors(register: Registrar) -> None:
    register.add_executor("tackroom_ray.executor:RayExecutor", name="ray", options=RayOptions,
                          summary="Each attempt a Ray task in its own worker process, on a local or existing cluster")


__all__ = ["AttemptDeadlineError", "PluginNotShippableError", "RayOptions", "WorkerLostError"]
