"""What crosses the process boundary to a worker: the runtime's :class:`~tackroom.executors.AttemptPlan`.

A plan pickles with its plugins as references (``module:qualname`` plus options
as data); plugin instances may hold clients, locks or sockets, so they never
travel. A worker resolves each class through its own plugin manager (the
installed entry points, so a worker runs the same plugins the driver does) and
builds fresh instances there. What this module adds is the check, before
anything runs, that a worker could import every class at all.
"""

from __future__ import annotations

from tackroom.executors import AttemptPlan, PluginRef, import_ref
from tackroom_app import get_plugin_manager
from tackroom_ray.errors import PluginNotShippableError

FIX = ("define it at module level in an importable module (a package, or a file on the workers' PYTHONPATH via "
       "[runtime.ray] runtime_env), or install it as a plugin")


def check_shippable(ref: PluginRef) -> None:
    """Raise :class:`PluginNotShippableError` when a worker could not import ``ref``'s class: it lives in
    ``__main__`` or inside a function, or its reference does not import back to it."""
    module, _, qualname = ref.reference.partition(":")
    if module == "__main__" or "<locals>" in qualname:
        raise PluginNotShippableError(f"{qualname} ({ref.reference}) cannot be imported by a worker process; {FIX}")
    try:
        same = import_ref(ref.reference) is ref.load(get_plugin_manager())
    except (ImportError, AttributeError):
        same = False
    if not same:
        raise PluginNotShippableError(f"{ref.reference} does not import back to {qualname}; {FIX}")


def check_plans(plans: list[AttemptPlan]) -> None:
    """Every plugin of ``plans`` can be imported by a worker (each class checked once, however many trials use it)."""
    refs = {ref.reference: ref for plan in plans for ref in (plan.harness, plan.sandbox, plan.verifier)}
    for ref in refs.values():
        check_shippable(ref)
