"""The ATIF mapping: what each part of a trajectory becomes, what comes back, and what is refused.

(Real runs of every harness round-trip in tests/test_atif_harness_runs.py; here, the shapes a harness may leave.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tackroom import TokenTurn, Trajectory
from tackroom_viewer.atif import AtifImportError, from_atif, to_atif
from tackroom_viewer.atif_models import AtifTrajectory


def harbor_check(document: dict) -> None:
    """Harbor's own models, where Harbor is installed (optional; the package's models always check)."""
    try:
        from harbor.models.trajectories import Trajectory as HarborTrajectory
    except ImportError:
        return
    HarborTrajectory.model_validate(document)


def round_trip(trajectory: Trajectory, result: dict | None = None) -> dict:
    document = json.loads(json.dumps(to_atif(trajectory, result)))
    AtifTrajectory.model_validate(document)
    harbor_check(document)
    back = from_atif(document)
    assert back.trajectory == trajectory
    assert back.result == result
    return document


TOOL_EPISODE = Trajectory(
    messages=[
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "List /app."},
        {"role": "assistant", "content": "", "reasoning_content": "ls it",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}},
                        {"id": "c2", "type": "function", "function": {"name": "read", "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt\n<script>x</script>", "is_error": False},
        {"role": "tool", "tool_call_id": "c2", "content": "bad arguments", "is_error": True},
        {"role": "assistant", "content": [{"type": "text", "text": "Done: "}, {"type": "text", "text": "a.txt"}]},
    ],
    turns=[TokenTurn(prompt_ids=[1, 2], completion_ids=[3, 4], logprobs=[-0.1, -0.2], finish_reason="tool_calls",
                     policy_version=3, logprobs_constrained=True),
           TokenTurn(prompt_ids=[1, 2, 3, 4, 5], completion_ids=[6], logprobs=[-0.3], finish_reason="stop")],
    token_ids=[1, 2, 3, 4, 5, 6], loss_mask=[0, 0, 1, 1, 0, 1], logprobs=[0.0, 0.0, -0.1, -0.2, 0.0, -0.3],
    final_answer="Done: a.txt", metrics={"turns": 2.0, "tool_calls": 2.0}, notes=["a note"],
)
RESULT = {"trial_id": "t-abc__bash__m__p0", "task": "t", "harness": "bash", "sandbox": "local", "verifier": "test-script",
          "model": "m", "reward": 1.0, "components": {"reward": 1.0}, "error": None}


def test_a_tool_episode_maps_to_steps_calls_observations_and_per_step_tokens():
    doc = round_trip(TOOL_EPISODE, RESULT)
    assert doc["schema_version"] == "ATIF-v1.8" and doc["session_id"] == RESULT["trial_id"]
    assert doc["agent"] == {"name": "bash", "version": doc["agent"]["version"], "model_name": "m",
                            "extra": {"framework": "tackroom", "sandbox": "local", "verifier": "test-script"}}
    assert [s["source"] for s in doc["steps"]] == ["system", "user", "agent", "agent"]
    agent = doc["steps"][2]
    assert agent["reasoning_content"] == "ls it"
    assert [(c["tool_call_id"], c["function_name"], c["arguments"]) for c in agent["tool_calls"]] == [
        ("c1", "bash", {"cmd": "ls"}), ("c2", "read", {})]     # unparseable arguments: {} (the text is kept aside)
    assert [r["source_call_id"] for r in agent["observation"]["results"]] == ["c1", "c2"]
    assert agent["observation"]["results"][0]["content"] == "a.txt\n<script>x</script>"
    assert agent["metrics"]["prompt_token_ids"] == [1, 2] and agent["metrics"]["completion_token_ids"] == [3, 4]
    assert agent["metrics"]["logprobs"] == [-0.1, -0.2] and agent["llm_call_count"] == 1
    assert doc["steps"][3]["message"] == [{"type": "text", "text": "Done: "}, {"type": "text", "text": "a.txt"}]
    assert doc["final_metrics"]["total_prompt_tokens"] == 7 and doc["final_metrics"]["total_steps"] == 4
    assert doc["final_metrics"]["extra"]["reward"] == 1.0
    assert doc["extra"]["tackroom"]["trajectory"]["loss_mask"] == [0, 0, 1, 1, 0, 1]


def test_odd_shapes_come_back_too():
    odd = Trajectory(messages=[
        {"role": "tool", "tool_call_id": "orphan", "content": "a result before any call"},   # no agent step before
        {"role": "developer", "content": None},                                                 # another role, no text
        {"role": "assistant", "content": "x", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
        {"role": "tool", "tool_call_id": "not-a-call", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
        {"role": "user", "content": "again", "name": "alice"},
    ], turns=[TokenTurn(prompt_ids=[1], completion_ids=[2]), TokenTurn(prompt_ids=[9], completion_ids=[8], branch=1)],
        stop_reason="max_turns")
    doc = round_trip(odd)        # two turns for one assistant message: kept at the root, not on the step
    assert "turns" in doc["extra"]["tackroom"]["trajectory"]
    assert "source_call_id" not in doc["steps"][2]["observation"]["results"][0]  # it answers no call of the step


def test_an_empty_conversation_gets_one_marked_step_and_comes_back_empty():
    doc = round_trip(Trajectory(stop_reason="error", notes=["the harness failed before the model"]),
                     {**RESULT, "reward": None, "error": {"class": "infra", "type": "X", "message": "m", "phase": "p"}})
    assert len(doc["steps"]) == 1 and doc["steps"][0]["extra"]["tackroom"]["synthetic"] is True


def test_a_document_from_another_producer_reads_as_a_trajectory():
    foreign = {
        "schema_version": "ATIF-v1.6", "session_id": "s1",
        "agent": {"name": "terminus-2", "version": "2.0", "model_name": "m"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "Make a file."},
            {"step_id": 2, "source": "agent", "message": "Running.",
             "tool_calls": [{"tool_call_id": "k", "function_name": "bash", "arguments": {"cmd": "touch f"}}],
             "observation": {"results": [{"source_call_id": "k", "content": "ok"}]},
             "metrics": {"prompt_token_ids": [1, 2], "completion_token_ids": [3], "logprobs": [-1.0]}},
            {"step_id": 3, "source": "agent", "message": "Made it.",
             "metrics": {"prompt_token_ids": [1, 2, 3, 4], "completion_token_ids": [5, 6], "logprobs": [-0.5, -0.25]}},
        ],
        "subagent_trajectories": [{"schema_version": "ATIF-v1.7", "trajectory_id": "sub", "agent": {
            "name": "a", "version": "1"}, "steps": [{"step_id": 1, "source": "user", "message": "hi"}]}],
    }
    harbor_check(foreign)
    back = from_atif(foreign)
    t = back.trajectory
    assert [m["role"] for m in t.messages] == ["user", "assistant", "tool", "assistant"]
    assert t.messages[1]["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"cmd": "touch f"}'}
    assert t.messages[2] == {"role": "tool", "tool_call_id": "k", "content": "ok"}
    assert [(u.prompt_ids, u.completion_ids) for u in t.turns] == [([1, 2], [3]), ([1, 2, 3, 4], [5, 6])]
    assert t.token_ids == [1, 2, 3, 4, 5, 6] and t.loss_mask == [0, 0, 1, 0, 1, 1]
    assert t.logprobs == [0.0, 0.0, -1.0, 0.0, -0.5, -0.25]
    assert t.final_answer == "Made it." and back.result is None and back.trial_id == "s1"
    assert "1 embedded subagent trajectories were not imported" in t.notes


@pytest.mark.parametrize(("document", "says"), [
    ({"agent": {"name": "a", "version": "1"}, "steps": []}, "steps"),
    ({"agent": {"name": "a", "version": "1"}, "steps": [{"step_id": 2, "source": "user", "message": "x"}]},
     "step ids run 1, 2, 3"),
    ({"agent": {"name": "a", "version": "1"}, "steps": [{"step_id": 1, "source": "user", "message": "x",
                                                         "tool_calls": []}]}, "only for agent steps"),
    ({"agent": {"name": "a", "version": "1"}, "steps": [{"step_id": 1, "source": "agent", "message": "x",
                                                         "observation": {"results": [{"source_call_id": "nope"}]}}]},
     "not among this step's tool_calls"),
    ({"schema_version": "ATIF-v9", "agent": {"name": "a", "version": "1"},
      "steps": [{"step_id": 1, "source": "user", "message": "x"}]}, "schema_version"),
    ({"agent": {"name": "a", "version": "1"}, "steps": [{"step_id": 1, "source": "user", "message": "x"}],
      "surprise": 1}, "surprise"),
    ({"agent": {"name": "a", "version": "1"}, "steps": [{"step_id": 1, "source": "agent", "message": "x",
                                                         "metrics": {"prompt_token_ids": [1], "completion_token_ids": [2],
                                                                     "logprobs": [-1.0, -2.0]}}]}, "inconsistent"),
])
def test_what_is_not_atif_is_refused_with_what_is_wrong(document, says):
    with pytest.raises(AtifImportError, match="ATIF|token data") as info:
        from_atif(document)
    assert says in str(info.value)


# -- the commands -------------------------------------------------------------------------------------
def tackroom(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tackroom_app", *args], capture_output=True, text=True, timeout=120)


def test_export_then_import_gives_back_every_trial_of_every_run(runs_root, tmp_path):
    trials = sorted(p.parent for p in runs_root.rglob("trajectory.json"))
    done = tackroom("export", "atif", str(runs_root), str(tmp_path / "atif"))
    assert done.returncode == 0, done.stderr
    files = sorted((tmp_path / "atif").glob("*.json"))
    assert len(files) == len(trials) == 9 and f"wrote {len(trials)} ATIF trajectories" in done.stdout
    assert any(f.name.startswith("train-demo__rollouts__step00001-") for f in files)  # nested keys flattened
    for f in files:
        harbor_check(json.loads(f.read_text()))
    done = tackroom("import", "atif", str(tmp_path / "atif"), str(tmp_path / "back"))
    assert done.returncode == 0, done.stderr
    def contents(folders):  # result and trajectory of each folder, as one comparable text per trial
        return sorted(json.dumps([json.loads((f / "result.json").read_text()),
                                  Trajectory.model_validate_json((f / "trajectory.json").read_text()).model_dump()],
                                 sort_keys=True) for f in folders)

    back = sorted((tmp_path / "back").iterdir())
    assert len(back) == len(trials)   # one trial id in two runs (the matrix's "base" column and the run "base"): -2
    assert contents(back) == contents(trials)


def test_export_says_what_it_could_not_read(tmp_path):
    done = tackroom("export", "atif", str(tmp_path / "missing"), str(tmp_path / "out"))
    assert done.returncode != 0 and "no such folder" in done.stderr
    run = tmp_path / "run"
    (run / "t1").mkdir(parents=True)
    (run / "t1" / "trajectory.json").write_text('{"messages": [')                     # being written
    (run / "t2").mkdir()
    (run / "t2" / "trajectory.json").write_text('{"token_ids": [1], "loss_mask": []}')  # not a trajectory
    done = tackroom("export", "atif", str(run), str(tmp_path / "out"))
    assert done.returncode == 1 and "wrote 0 ATIF trajectories" in done.stdout
    assert "t1: no readable trajectory.json" in done.stderr
    assert "t2: trajectory.json is not a tackroom trajectory: " in done.stderr


def test_import_refuses_what_is_not_atif_and_keeps_hostile_ids_inside_the_folder(tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    (source / "list.json").write_text("[1, 2]")
    (source / "wrong.json").write_text('{"agent": {"name": "a", "version": "1"}, "steps": []}')
    doc = to_atif(TOOL_EPISODE, {**RESULT, "trial_id": "../../escape"})
    (source / "hostile.json").write_text(json.dumps(doc))
    done = tackroom("import", "atif", str(source), str(tmp_path / "out"))
    assert done.returncode == 1
    assert "list.json: not a JSON object" in done.stderr and "wrong.json: not an ATIF trajectory" in done.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["escape"]
    assert not (tmp_path / "escape").exists()
    missing = tackroom("import", "atif", str(tmp_path / "nothing"), str(tmp_path / "out"))
    assert missing.returncode != 0 and "no such file or folder" in missing.stderr


def test_import_reads_no_file_through_a_link_and_a_deeply_nested_file_stops_only_itself(tmp_path):
    """A linked source file (or folder) would copy a host file into a trial folder; JSON nested past the parser's
    depth stopped the whole import with a RecursionError traceback. Each is refused by name; the rest imports."""
    source, elsewhere = tmp_path / "in", tmp_path / "elsewhere"
    source.mkdir()
    elsewhere.mkdir()
    good = to_atif(TOOL_EPISODE, {**RESULT, "trial_id": "good"})
    (source / "good.json").write_text(json.dumps(good))
    (elsewhere / "host.json").write_text(json.dumps(to_atif(TOOL_EPISODE, {**RESULT, "trial_id": "from-the-host"})))
    os.symlink(elsewhere / "host.json", source / "linked.json")
    os.symlink(elsewhere, source / "linked-folder")
    (source / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    done = tackroom("import", "atif", str(source), str(tmp_path / "out"))
    assert done.returncode == 1, done.stderr
    said = " ".join(done.stderr.split())
    assert "linked.json: a symbolic link" in said, said
    assert "deep.json: JSON nested deeper" in said and "Traceback" not in done.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["good"]  # nothing from the linked folder either
