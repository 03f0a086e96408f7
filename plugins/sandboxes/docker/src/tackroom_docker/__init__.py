"""tackroom-docker: the ``docker`` sandbox and the ``tackroom images`` commands.

Registered through the ``tackroom`` entry-point group like any third-party plugin.
"""

from __future__ import annotations

from typing import Any

import tackroom
from tackroom_docker.provider import DockerProvider

__all__ = ["DockerProvider"]


tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_sandboxes(register: tackroom.Registrar) -> None:
    register.add_sandbox(DockerProvider)


@tackroom.hookimpl
def tackroom_commands(app: Any) -> None:
    from tackroom_docker.commands import images_app

    app.add_typer(images_app, name="images")
