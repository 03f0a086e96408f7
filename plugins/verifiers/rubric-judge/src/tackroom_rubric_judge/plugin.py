"""Entry point of tackroom-rubric-judge: registers the ``rubric-judge`` verifier, by reference.

Every ``tackroom`` command loads every installed plugin's registration; the verifier's module imports the judge
client and httpx, so it loads only when a config names ``rubric-judge``. :data:`RUBRIC_JUDGE` is the one
declaration of its name, summary and capabilities: the class takes it.
"""

from __future__ import annotations

import tackroom

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""

RUBRIC_JUDGE = tackroom.PluginSpec(
    kind="verifier",
    name="rubric-judge",
    reference="tackroom_rubric_judge.verifier:RubricJudgeVerifier",
    summary="Asks an LLM judge for a {rationale, passed} verdict per rubric criterion; reward = mean or all_pass.",
    capabilities=frozenset({tackroom.Capability.LLM_JUDGE, tackroom.Capability.CHANGES_REPORT}),
)


@tackroom.hookimpl
def tackroom_verifiers(register: tackroom.Registrar) -> None:
    register.add_verifier(RUBRIC_JUDGE)
