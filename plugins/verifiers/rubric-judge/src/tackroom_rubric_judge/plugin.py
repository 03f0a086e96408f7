"""Entry point of tackroom-rubric-judge: registers the ``rubric-judge`` verifier."""

from __future__ import annotations

import tackroom
from tackroom_rubric_judge.verifier import RubricJudgeVerifier


@tackroom.hookimpl
def tackroom_verifiers(register: tackroom.Registrar) -> None:
    register.add_verifier(RubricJudgeVerifier)
