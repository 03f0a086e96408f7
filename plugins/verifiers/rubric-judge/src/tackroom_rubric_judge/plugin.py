"""Entry point of tackroom-rubric-judge: registers the ``rubric-judge`` verifier."""

from __future__ import annotations

import tackroom
from tackroom_rubric_judge.verifier import RubricJudgeVerifier

tackroom_contract = 2
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_verifiers(register: tackroom.Registrar) -> None:
    register.add_verifier(RubricJudgeVerifier)
