"""Entry point of tackroom-file-diff: registers the ``file-diff`` verifier."""

from __future__ import annotations

import tackroom
from tackroom_file_diff.verifier import FileDiffVerifier

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_verifiers(register: tackroom.Registrar) -> None:
    register.add_verifier(FileDiffVerifier)
