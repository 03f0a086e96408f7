"""tackroom-archipelago: the ``archipelago`` harness (an MCP tool loop over a world, exact token accounting).

Registered lazily: every ``tackroom`` command loads every installed plugin's entry point, and the harness's
module imports the MCP SDK, so listing plugins or running another harness never imports it; the class loads
when a config names ``archipelago``. :data:`ARCHIPELAGO` is the one declaration of its name, summary and
capabilities: the class takes it. ``from tackroom_archipelago import
ArchipelagoHarness`` still works (imported on first access).
"""

from __future__ import annotations

from typing import Any

import tackroom
from tackroom_archipelago.spec import ARCHIPELAGO

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_harnesses(register: tackroom.Registrar) -> None:
    register.add_harness(ARCHIPELAGO)


@tackroom.hookimpl
def tackroom_commands(app: Any) -> None:
    from tackroom_archipelago.cli import add_archipelago_commands  # typer only; the MCP SDK loads on use

    add_archipelago_commands(app)


_EXPORTS = tackroom.LazyExports(__name__, {
    "tackroom_archipelago.harness": ["ArchipelagoHarness", "ArchipelagoOptions"],
    "tackroom_archipelago.world": ["WorldSpec", "WorldTable", "load_world", "task_world_dir"],
    "tackroom_archipelago.mercor_import": ["import_task", "import_tasks"],
})
__getattr__, __dir__, __all__ = _EXPORTS.getattr, _EXPORTS.dir, _EXPORTS.names
