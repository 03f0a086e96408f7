"""The two pluggy markers, and nothing else.

Plugins decorate their hook implementations with :data:`hookimpl`; the core's
hook specifications use :data:`hookspec`.
"""

import pluggy

PROJECT_NAME = "tackroom"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
