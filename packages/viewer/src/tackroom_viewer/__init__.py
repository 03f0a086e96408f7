"""tackroom-viewer: ``tackroom view`` (a local web viewer for run folders) and ``tackroom export/import atif``
(trajectories in Harbor's Agent Trajectory Interchange Format).

The commands are added through the ``tackroom_commands`` hook. Importing this module is cheap: the names
below load their module on first use. See the package's ``README.md``.
"""

from __future__ import annotations

from typing import Any

import tackroom

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_commands(app: Any) -> None:
    from tackroom_viewer.cli import add_commands

    add_commands(app)


_EXPORTS = tackroom.LazyExports(__name__, {
    "tackroom_viewer.app": ["create_app"],
    "tackroom_viewer.atif": ["AtifImportError", "from_atif", "to_atif"],
    "tackroom_viewer.run_folders": ["RunFolder", "TrialFolder", "find_runs"],
}, extra=["tackroom_commands"])
__getattr__, __dir__, __all__ = _EXPORTS.getattr, _EXPORTS.dir, _EXPORTS.names
