"""What a sandbox cannot run is refused by name once, before the run folder is claimed: by its capabilities (the
internet without ``network``, an allowlist without ``network_allowlist``) and by the provider itself
(``SandboxProvider.refuses``: local and a Dockerfile it cannot read). ``tackroom run`` and ``tackroom matrix``
share ``tackroom_app.refuse_unrunnable``; the attempt asks again for drivers that did not."""

from __future__ import annotations

from pathlib import Path

import tackroom
from tackroom._task import sandbox_refusal
from tackroom_app import RunConfig, load_dataset, refuse_unrunnable, run_config
from tackroom_local import LocalSandboxProvider


def write_task(root: Path, name: str, *, environment: str = "", dockerfile: str | None = None) -> Path:
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_text("do nothing")
    (task / "task.toml").write_text(f"[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n[environment]\n{environment}")
    (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    if dockerfile is not None:
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    return task


class Offline(LocalSandboxProvider):
    """A sandbox that cannot give the internet (no ``network`` capability)."""

    name = "offline-only"
    capabilities = frozenset({"persistent_processes"})


def test_the_internet_on_a_sandbox_without_network_is_refused_by_name(tmp_path):
    online = tackroom.load_task(write_task(tmp_path, "online", environment='network_mode = "public"\n'))
    offline = tackroom.load_task(write_task(tmp_path, "offline"))
    assert sandbox_refusal(Offline(), offline) is None
    said = sandbox_refusal(Offline(), online)
    assert said is not None and "'offline-only' sandbox cannot give a sandbox the internet" in said
    assert "'network' capability" in said
    assert sandbox_refusal(LocalSandboxProvider(), online) is None  # local declares it


def test_refuse_unrunnable_moves_refused_tasks_to_the_failures(tmp_path):
    write_task(tmp_path / "tasks", "online", environment='network_mode = "public"\n')
    write_task(tmp_path / "tasks", "offline")
    dataset = load_dataset([str(tmp_path / "tasks")])
    refuse_unrunnable(dataset, Offline())
    assert [t.path.name for t in dataset.tasks] == ["offline"]
    assert [f.path.name for f in dataset.failures] == ["online"] and "internet" in dataset.failures[0].message


async def test_tackroom_run_on_local_refuses_a_dockerfile_it_cannot_read_before_the_run(tmp_path):
    tasks = tmp_path / "tasks"
    write_task(tasks, "good", dockerfile="FROM debian\nWORKDIR /app\n")
    write_task(tasks, "broken", dockerfile="FROM debian\nRUN echo \\\n")  # ends with a line continuation
    config = RunConfig.model_validate({"tasks": [str(tasks)], "harness": {"name": "nop"}, "sandbox": {"name": "local"},
                                       "runtime": {"out": str(tmp_path / "runs")}})
    _, results, failures = await run_config(config, progress=False, run_id="r")
    assert [f.path.name for f in failures] == ["broken"]
    assert failures[0].message.startswith("the 'local' sandbox cannot read the task's Dockerfile: ")
    assert "line continuation" in failures[0].message
    assert [r.task for r in results] == ["good"]


def test_tasks_with_a_dockerfile_on_a_sandbox_that_does_not_build_them_get_a_warning(tmp_path, caplog):
    write_task(tmp_path / "tasks", "built", dockerfile="FROM debian\nWORKDIR /app\n")
    dataset = load_dataset([str(tmp_path / "tasks")])
    refuse_unrunnable(dataset, LocalSandboxProvider())
    assert [t.path.name for t in dataset.tasks] == ["built"]  # run, as local always did, with the warning
    assert "does not build fully (it lacks the 'dockerfile' capability" in caplog.text
