"""tackroom-serve: ``tackroom serve``, tackroom's harnesses, sandboxes and graders as a rollout service over HTTP
(batches of tasks × samples, their state in a database, results streamed as they finish), and its Python client.

The command is added through the ``tackroom_commands`` hook. Importing this module is cheap: the names below load
their module on first use, and the client's (``tackroom_serve.client``) import neither starlette nor SQLAlchemy.
See the package's ``README.md``.
"""

from __future__ import annotations

from typing import Any

import tackroom

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_commands(app: Any) -> None:
    from tackroom_serve.cli import add_commands

    add_commands(app)


_EXPORTS = tackroom.LazyExports(__name__, {
    "tackroom_serve.client": ["AsyncServeClient", "ServeClient", "ServeError"],
    "tackroom_serve.app.server": ["ServeSettings", "Service"],
    "tackroom_serve.app.auth": ["Tokens"],
    "tackroom_serve.models": ["BatchCreate", "BatchView", "Outcome", "RolloutView", "SqlResult"],
}, extra=["tackroom_commands"])
__getattr__, __dir__, __all__ = _EXPORTS.getattr, _EXPORTS.dir, _EXPORTS.names
