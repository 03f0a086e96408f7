"""Scoring (mean, all_pass, penalties), rubric validation, verdict parsing, registration and options."""

from __future__ import annotations

import pytest

import tackroom
import tackroom_app
from tackroom.testing import check_registered
from tackroom_rubric_judge import (
    CriterionResult,
    RubricJudgeVerifier,
    final_answer,
    parse_verdict,
    rubric_criteria,
    score,
    task_rubric,
)
from tackroom_rubric_judge.verdict import InvalidVerdict


def result(cid: str, passed: bool, weight: float = 1.0, penalty: bool = False) -> CriterionResult:
    return CriterionResult(id=cid, criterion=cid, weight=weight, penalty=penalty or weight < 0, passed=passed,
                           rationale="")


def test_mean_is_weighted_and_all_pass_needs_every_criterion():
    s = score([result("a", True, 3), result("b", False, 1)])
    assert (s.mean, s.all_pass) == (0.75, 0.0)
    assert s.components == {"criterion:a": 1.0, "criterion:b": 0.0, "mean": 0.75, "all_pass": 0.0}
    assert score([result("a", True), result("b", True)]).all_pass == 1.0


def test_penalties_subtract_and_break_all_pass():
    # weight < 0 or penalty = true mark a penalty; "passed" means the mistake happened
    s = score([result("a", True, 2), result("b", True, 2), result("oops", True, -1)])
    assert (s.mean, s.all_pass) == (0.75, 0.0)
    assert s.components["penalty:oops"] == 1.0
    clean = score([result("a", True, 2), result("b", True, 2), result("oops", False, 1, penalty=True)])
    assert (clean.mean, clean.all_pass) == (1.0, 1.0)
    floor = score([result("a", False), result("oops", True, -5)])
    assert floor.mean == 0.0  # clipped, never negative
    only_penalties = score([result("x", True, -1), result("y", False, -3)])
    assert (only_penalties.mean, only_penalties.all_pass) == (0.75, 0.0)


def test_rubric_ids_penalties_and_errors(tmp_path, rubric_task):
    task = rubric_task([{"criterion": "Mentions Paris", "weight": 2},
                        {"id": "no-delete", "criterion": "Deletes an input file", "penalty": True},
                        {"criterion": "Is rude", "weight": -0.5}])
    criteria = rubric_criteria(task)
    assert [(c.id, c.weight, c.penalty) for c in criteria] == [("c1", 2, False), ("no-delete", 1, True), ("c3", -0.5, True)]
    assert task_rubric(task)[1].is_penalty and task_rubric(task)[2].is_penalty

    with pytest.raises(tackroom.TaskError, match="needs a rubric; add \\[\\[rubric\\]\\] tables"):
        rubric_criteria(rubric_task([], name="empty"))
    with pytest.raises(tackroom.TaskError, match="rubric id 'x' is used twice"):
        rubric_criteria(rubric_task([{"id": "x", "criterion": "a"}, {"id": "x", "criterion": "b"}], name="dup"))
    with pytest.raises(tackroom.TaskError, match="every rubric weight is 0"):
        rubric_criteria(rubric_task([{"criterion": "a", "weight": 0}], name="zero"))


def test_a_rubric_in_task_toml_with_a_penalty(tmp_path):
    task_dir = tmp_path / "t"
    task_dir.mkdir()
    (task_dir / "instruction.md").write_text("do it\n")
    (task_dir / "task.toml").write_text(
        '[[rubric]]\nid = "ok"\ncriterion = "Did it"\n\n[[rubric]]\ncriterion = "Broke it"\npenalty = true\nweight = 2\n')
    criteria = rubric_criteria(tackroom.load_task(task_dir))
    assert [(c.id, c.penalty, c.magnitude) for c in criteria] == [("ok", False, 1.0), ("c2", True, 2.0)]


def test_a_rubric_this_plugin_cannot_read_names_the_file_and_the_field(tmp_path, rubric_task, rubric_task_dir):
    with pytest.raises(tackroom.TaskError, match=r"rubric.json: rubric\[0\].weight: Input should be a valid number"):
        task_rubric(rubric_task([{"criterion": "a", "weight": "heavy"}], name="bad-weight"))
    broken = rubric_task_dir([], name="broken-json")
    (broken / "rubric.json").write_text("[{")
    with pytest.raises(tackroom.TaskError, match=r"rubric.json: invalid JSON"):
        rubric_criteria(tackroom.load_task(broken))  # loading never reads the rubric; this plugin does
    in_toml = rubric_task_dir([{"criterion": "from json"}], name="toml-wins",
                              extra_toml='[[rubric]]\ncriterion = "from toml"\ncolour = "red"\n')
    with pytest.raises(tackroom.TaskError, match=r"task.toml: rubric\[0\].colour: unknown field \(the \[rubric\] "
                                                 r"table is read by the rubric-judge plugin\)"):
        task_rubric(tackroom.load_task(in_toml))


@pytest.mark.parametrize("text", [
    '{"rationale": "ok", "passed": true}',
    '```json\n{"rationale": "ok", "passed": true}\n```',
    'Here is my verdict: {"rationale": "ok", "passed": "true"} hope it helps',
    '{\n\n"rationale"\n\n:\n\n"ok"\n\n,\n\n"passed"\n\n:\n\ntrue\n\n}',  # what a tiny model under a grammar writes
])
def test_verdicts_parse_from_what_judges_write(text):
    verdict = parse_verdict(text)
    assert verdict.passed is True and verdict.rationale == "ok"


@pytest.mark.parametrize(("text", "problem"), [
    ("yes it passes", "not valid JSON"),
    ("[1, 2]", "a JSON list, not an object"),
    ('{"rationale": "x"}', "passed: Field required"),
    ('{"rationale": "x", "passed": "maybe"}', "passed: Input should be a valid boolean"),
])
def test_what_is_not_a_verdict_says_why(text, problem):
    with pytest.raises(InvalidVerdict, match=problem):
        parse_verdict(text)


def test_final_answer_falls_back_to_the_last_assistant_message():
    assert final_answer(tackroom.Trajectory(final_answer="done")) == "done"
    t = tackroom.Trajectory(messages=[{"role": "assistant", "content": "first"}, {"role": "user", "content": "more"},
                                      {"role": "assistant", "content": [{"type": "text", "text": "second"}]},
                                      {"role": "tool", "content": "x"}])
    assert final_answer(t) == "second"
    assert final_answer(tackroom.Trajectory()) == ""


def test_rubric_judge_is_registered_and_conforms():
    assert check_registered("verifier", "rubric-judge", distribution="tackroom-rubric-judge") is RubricJudgeVerifier


def test_it_is_registered_by_reference_as_the_class_says():
    """Loading the plugins (every `tackroom` command) does not import the verifier; its registration says what it says."""
    entry = tackroom_app.PluginManager(env={}).entry("verifier", "rubric-judge")
    assert entry.reference == "tackroom_rubric_judge.verifier:RubricJudgeVerifier"
    assert (entry.summary, entry.capabilities) == (RubricJudgeVerifier.summary(), RubricJudgeVerifier.capabilities)
    assert entry.load() is RubricJudgeVerifier


def test_the_catalogue_lists_it_as_registered():
    import tomllib
    from pathlib import Path

    catalogue = tomllib.loads((Path(tackroom.__file__).parent / "registry.toml").read_text())["plugin"]
    (entry,) = [p for p in catalogue if p["name"] == "rubric-judge"]
    assert (entry["kind"], entry["distribution"], entry["entry_point"]) == (
        "verifier", "tackroom-rubric-judge", "rubric-judge")
    assert entry["summary"] == RubricJudgeVerifier.summary()


def test_options_are_validated_with_their_paths():
    v = tackroom_app.instantiate("verifier", tackroom_app.PluginSelection(
        name="rubric-judge", base_url="http://127.0.0.1:8000/v1", score="all_pass", retry={"max_attempts": 3}))
    assert v.options.retry.max_attempts == 3 and v.endpoint().transport == "openai"
    with pytest.raises(tackroom.ConfigError, match="verifier.retry.max_atempts"):
        tackroom_app.instantiate("verifier", tackroom_app.PluginSelection(name="rubric-judge", retry={"max_atempts": 3}))
    with pytest.raises(tackroom.ConfigError, match="verifier.score"):
        tackroom_app.instantiate("verifier", tackroom_app.PluginSelection(name="rubric-judge", score="median"))
    with pytest.raises(tackroom.ConfigError, match="transport 'openai' needs base_url"):
        tackroom_app.instantiate("verifier", tackroom_app.PluginSelection(name="rubric-judge", transport="openai"))
    litellm = RubricJudgeVerifier({"model": "anthropic/claude-sonnet-4", "api_keys": ["sk-1"]})
    assert litellm.endpoint().transport == "litellm" and "sk-1" not in repr(litellm.options)
