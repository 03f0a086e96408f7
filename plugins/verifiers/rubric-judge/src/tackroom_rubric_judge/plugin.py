"""Entry point of tackroom-rubric-judge: registers the ``rubric-judge`` verifier, by reference.

Every ``tackroom`` command loads every installed plugin's registration; the verifier's module imports the judge
client and httpx, so it loads only when a config names ``rubric-judge``.
"""

from __future__ import annotations

import tackroom

tackroom_contract = 2
"""The plugin contract this distribution is written for (CHANGELOG.md)."""

VERIFIER_REF = "tackroom_rubric_judge.verifier:RubricJudgeVerifier"
SUMMARY = "Asks an LLM judge for a {rationale, passed} verdict per rubric criterion; reward = mean or all_pass."
CAPABILITIES = frozenset({"llm_judge", "changes_report"})
"""What the class declares; tests/test_scoring.py holds the registration and the class together."""


@tackroom.hookimpl
def tackroom_verifiers(register: tackroom.Registrar) -> None:
    register.add_verifier(VERIFIER_REF, name="rubric-judge", summary=SUMMARY, capabilities=CAPABILITIES)
