"""tackroom-ray: the ``ray`` executor (``[runtime] executor = "ray"``, options in ``[runtime.ray]``).

Registered lazily: importing this package (which every ``tackroom`` command
does through its entry point) imports neither Ray nor the executor module;
both are imported when a run selects the ``ray`` executor. :data:`RAY` is the one declaration of its name,
summary and options model (``[runtime.ray]`` is validated before the class is imported): the class takes it.
"""

from __future__ import annotations

from tackroom import PluginSpec, Registrar, hookimpl
from tackroom_ray.errors import AttemptDeadlineError, PluginNotShippableError, WorkerLostError
from tackroom_ray.options import RayOptions

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


RAY = PluginSpec(
    kind="executor",
    name="ray",
    reference="tackroom_ray.executor:RayExecutor",
    summary="Each attempt a Ray task in its own worker process, on a local or existing cluster",
    options=RayOptions,
)


@hookimpl
def tackroom_executors(register: Registrar) -> None:
    register.add_executor(RAY)


__all__ = ["RAY", "AttemptDeadlineError", "PluginNotShippableError", "RayOptions", "WorkerLostError"]
