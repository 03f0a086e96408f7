"""tackroom-matrix: ``tackroom matrix`` — models × harness rows × tasks × passes through the trial runtime,
and the reports.

The command is added through the ``tackroom_commands`` hook. Importing this
module is cheap: the names below load their module on first use, so every other
command of the CLI starts as fast as without the matrix. See the package's
``README.md`` for the config, the statistics and the outputs.
"""

from __future__ import annotations

from typing import Any

import tackroom

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_commands(app: Any) -> None:
    from tackroom_matrix.cli import add_matrix_command

    add_matrix_command(app)


_EXPORTS = tackroom.LazyExports(__name__, {
    "tackroom_matrix.config": ["HarnessRow", "MatrixConfig", "load_matrix_config", "parse_matrix_config"],
    "tackroom_matrix.endpoints": ["EndpointStatus", "EndpointUnreachableError"],
    "tackroom_matrix.report": ["MatrixReport", "build_report"],
    "tackroom_matrix.report_files": ["write_reports"],
    "tackroom_matrix.runner": ["MatrixOutcome", "run_matrix"],
    "tackroom_matrix.stats": ["CellStats", "cell_stats", "pass_at_k"],
}, extra=["tackroom_commands"])
__getattr__, __dir__, __all__ = _EXPORTS.getattr, _EXPORTS.dir, _EXPORTS.names
