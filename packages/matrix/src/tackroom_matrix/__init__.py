"""tackroom-matrix: ``tackroom matrix`` — models × harness rows × tasks × passes through the trial runtime,
and the reports.

The command is added through the ``tackroom_commands`` hook. Importing this
module is cheap: the names below load their module on first use, so every other
command of the CLI starts as fast as without the matrix. See the package's
``README.md`` for the config, the statistics and the outputs.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

import tackroom

tackroom_contract = 2
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_commands(app: Any) -> None:
    from tackroom_matrix.cli import add_matrix_command

    add_matrix_command(app)


_EXPORTS = {
    "CellStats": "stats", "cell_stats": "stats", "pass_at_k": "stats",
    "EndpointStatus": "endpoints", "EndpointUnreachableError": "endpoints",
    "HarnessRow": "config", "MatrixConfig": "config",
    "load_matrix_config": "config", "parse_matrix_config": "config",
    "MatrixOutcome": "runner", "run_matrix": "runner",
    "MatrixReport": "report", "build_report": "report", "write_reports": "report",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"tackroom_matrix.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'tackroom_matrix' has no attribute {name!r}")


__all__ = ["tackroom_commands", *sorted(_EXPORTS)]
