"""The two pluggy markers (plugins' :data:`hookimpl`, core's :data:`hookspec`), and nothing else."""

import pluggy

PROJECT_NAME = "tackroom"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
