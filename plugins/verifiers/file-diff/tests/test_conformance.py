"""file-diff passes the verifier conformance kit, on the kit's task and on a task of its own."""

from __future__ import annotations

from pathlib import Path

from tackroom.testing import VerifierScenario, verifier_self_check
from tackroom_file_diff import FileDiffVerifier


async def test_conforms_on_the_kit_task():
    report = await verifier_self_check(FileDiffVerifier, distribution="tackroom-file-diff")
    assert {r.name for r in report.results if r.passed} == {
        "plugin", "registered", "options", "scores_good", "scores_bad_low", "task_error", "sandbox_lost",
        "cancel_verify"}
    skipped = {r.name: r.message for r in report.skipped}
    assert set(skipped) == {"planted_reward", "service_down"}
    assert "does not read reward files" in skipped["planted_reward"]


def write_totals_task(root: Path) -> Path:
    """A csv output graded with a numeric tolerance, and a scratch file that must be removed."""
    task = root / "totals"
    (task / "expected" / "app").mkdir(parents=True)
    (task / "instruction.md").write_text("Write per-region totals to /app/totals.csv and delete /app/scratch.txt.\n")
    (task / "task.toml").write_text(
        'version = "1.0"\n[verifier]\ntimeout_sec = 60\n'
        '[file_diff]\nmust_not_exist = ["/app/scratch.txt"]\n[file_diff.formats.csv]\nabs_tol = 0.01\n'
    )
    (task / "expected" / "app" / "totals.csv").write_text("region,total\nnorth,3.333\nsouth,7\n")
    return task


async def test_conforms_on_a_task_of_its_own(tmp_path):
    good = VerifierScenario(commands="printf 'region,total\\nnorth,3.33\\nsouth,7.0\\n' > /app/totals.csv",
                            expected_score=1.0)  # within abs_tol, and no scratch file
    bad = VerifierScenario(commands="printf 'region,total\\nnorth,3\\nsouth,9\\n' > /app/totals.csv && "
                                    "echo left > /app/scratch.txt")
    report = await verifier_self_check(
        FileDiffVerifier, task=write_totals_task(tmp_path), good=good, bad=bad,
        skip={"plugin", "registered", "options", "service_down"},  # proven on the kit task above
    )
    assert {r.name for r in report.results if r.passed} == {
        "scores_good", "scores_bad_low", "task_error", "sandbox_lost", "cancel_verify"}
