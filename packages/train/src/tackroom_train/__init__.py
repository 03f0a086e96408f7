"""tackroom-train: ``tackroom train`` — SkyRL's fully-async trainer with any tackroom harness as the rollout engine.

Importing this module imports neither SkyRL nor torch: the ``train`` command
is added through the ``tackroom_commands`` hook and imports what it needs
when it runs. :class:`tackroom_train.generator.TackroomGenerator` is SkyRL's
``GeneratorInterface`` over the trial runtime.
"""

from __future__ import annotations

from typing import Any

import tackroom

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_commands(app: Any) -> None:
    from tackroom_train.cli import add_train_command
    from tackroom_train.collect.cli import add_collect_command

    add_train_command(app)
    add_collect_command(app)


__all__ = ["tackroom_commands"]
