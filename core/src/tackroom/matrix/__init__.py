"""``tackroom matrix``: models × harness rows × tasks × passes through the trial runtime, and the reports.

See ``README.md`` beside this file for the config, the statistics and the outputs.
"""

from tackroom.matrix.config import HarnessRow, MatrixConfig, ModelConfig, load_matrix_config, parse_matrix_config
from tackroom.matrix.endpoints import EndpointStatus, EndpointUnreachableError
from tackroom.matrix.report import MatrixReport, build_report, write_reports
from tackroom.matrix.runner import MatrixOutcome, run_matrix
from tackroom.matrix.stats import CellStats, cell_stats, pass_at_k

__all__ = [
    "CellStats",
    "EndpointStatus",
    "EndpointUnreachableError",
    "HarnessRow",
    "MatrixConfig",
    "MatrixOutcome",
    "MatrixReport",
    "ModelConfig",
    "build_report",
    "cell_stats",
    "load_matrix_config",
    "parse_matrix_config",
    "pass_at_k",
    "run_matrix",
    "write_reports",
]
