"""For executor authors: where trial attempts run (``[runtime] executor``). An executor is a plugin registered
through the ``tackroom_executors`` hook (a class, or a :class:`~tackroom.PluginSpec` whose ``options`` model its
``[runtime.<name>]`` table); core registers ``asyncio``, tackroom-ray ``ray``. docs/writing-plugins.md has an example.
"""

from tackroom._attempt import AttemptPlan, PluginRef, run_attempt
from tackroom._errors import ExecutorNotFoundError, ExecutorUnavailableError
from tackroom._executor import AsyncioExecutor, Executor
from tackroom._import_ref import import_ref
from tackroom._plugin import NoOptions
from tackroom._resolve import make_executor

__all__ = [
    # The interface, its default options, and core's own executor (a base for in-process ones)
    "Executor",
    "NoOptions",
    "AsyncioExecutor",
    # What an executor runs: a picklable plan, plugins by reference, and the one function that runs it
    "AttemptPlan",
    "PluginRef",
    "run_attempt",
    "import_ref",
    # Choosing one by name, and the errors of doing so
    "make_executor",
    "ExecutorNotFoundError",
    "ExecutorUnavailableError",
]
