"""For sandbox plugins: the environment the grader's command starts with (:meth:`tackroom.Sandbox.run_grader`).

docs/threat-model.md ("Grading") says why: variables that would load the agent's code into the grader's
interpreters are never passed on (:data:`GRADER_SCRUBBED_ENV`), and :data:`GRADER_CLEAN_ENV` is set.
"""

from tackroom._sandbox import GRADER_CLEAN_ENV, GRADER_SCRUBBED_ENV

__all__ = ["GRADER_SCRUBBED_ENV", "GRADER_CLEAN_ENV"]
