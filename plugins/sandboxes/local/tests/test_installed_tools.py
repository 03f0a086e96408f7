"""What the task's Dockerfile installed in the local sandbox's writable roots is what grades, whatever the agent did.

The task's environment installs a grader tool into a virtualenv under /opt (``gradetool``, importing ``gradelib``
from the venv's site-packages) and puts ``/root/.local/bin`` and the venv first on ``PATH``; ``test.sh`` runs it,
and scores 1 unless it prints FAIL (so a tool that is gone, or prints nothing, scores 1: graders that parse a
runner's output are like that). Each attack is a real trial whose oracle "solution" writes a wrong answer and then
changes the tool; every one must score 0 and the trial's notes must name what was put back or removed."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
import uuid
from pathlib import Path

import pytest

import tackroom
import tackroom.testing
import tackroom_app
from tackroom import Trial
from tackroom_app import TrialPlugins, TrialRuntime
from tackroom_local import LocalSandboxProvider
from tackroom_local.dockerfile import parse_env

SITE = "$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))')"
"""The venv's site-packages, as a shell expression (its python version is the host's)."""

DOCKERFILE = f"""\
FROM python:3.11-slim
WORKDIR /app
RUN python3 -m venv --without-pip /opt/venv
COPY gradetool /opt/venv/bin/gradetool
COPY gradelib.py /opt/src/gradelib.py
RUN chmod +x /opt/venv/bin/gradetool && mv /opt/src/gradelib.py "{SITE}/"
COPY solve_me.sh /app/solve_me.sh
RUN chmod +x /app/solve_me.sh
COPY helper.py /srv/lib/helper.py
ENV PATH=/root/.local/bin:/opt/venv/bin:$PATH
"""
GRADETOOL = """\
#!/opt/venv/bin/python
import gradelib
print("PASS" if gradelib.check(open("/app/answer.txt").read()) else "FAIL")
"""
GRADELIB = '''\
"""The task's grading library: only 42 passes. (Long enough that a fake of the same size fits in it.)"""


def check(text):
    return text.strip() == "42"
'''
FILES = {
    "environment/Dockerfile": DOCKERFILE,
    "environment/gradetool": GRADETOOL,
    "environment/gradelib.py": GRADELIB,
    "environment/solve_me.sh": "#!/bin/sh\necho 0\n",
    "environment/helper.py": "ANSWER = 0\n",
}
BY_PATH = "if gradetool | grep -q FAIL; then echo 0; else echo 1; fi > /logs/verifier/reward.txt\n"
BY_ABSOLUTE = "if /opt/venv/bin/gradetool | grep -q FAIL; then echo 0; else echo 1; fi > /logs/verifier/reward.txt\n"
WRONG = "echo wrong > /app/answer.txt\n"
PASS_SCRIPT = "printf '#!/bin/sh\\necho PASS\\n'"
FAKE_PYC = """\
python3 - <<'EOF'
import os, py_compile, sys, sysconfig
site = sysconfig.get_path("purelib")
st = os.stat(os.path.join(site, "gradelib.py"))
fake = "def check(text):\\n    return True\\n"
fake += "#" * (st.st_size - len(fake) - 1) + "\\n"
open("/tmp/gradelib.py", "w").write(fake)
os.utime("/tmp/gradelib.py", ns=(st.st_atime_ns, st.st_mtime_ns))
pyc = os.path.join(site, "__pycache__", f"gradelib.{sys.implementation.cache_tag}.pyc")
py_compile.compile("/tmp/gradelib.py", cfile=pyc, doraise=True)
EOF
"""

ATTACKS = {
    "tool-overwritten": (f"{PASS_SCRIPT} > /opt/venv/bin/gradetool\n", BY_ABSOLUTE, "put back",
                         "/opt/venv/bin/gradetool"),
    "module-overwritten": (f"echo 'def check(text): return True' > \"{SITE}/gradelib.py\"\n", BY_ABSOLUTE, "put back",
                           "site-packages/gradelib.py"),
    "tool-made-a-link": ("rm /opt/venv/bin/gradetool && ln -s /bin/true /opt/venv/bin/gradetool\n", BY_PATH, "put back",
                         "/opt/venv/bin/gradetool"),
    "tool-deleted": ("rm /opt/venv/bin/gradetool\n", BY_PATH, "put back", "/opt/venv/bin/gradetool"),
    "shadow-earlier-on-path": (f"mkdir -p /root/.local/bin && {PASS_SCRIPT} > /root/.local/bin/gradetool && "
                               "chmod +x /root/.local/bin/gradetool\n", BY_PATH, "removed",
                               "/root/.local/bin/gradetool"),
    "pth-in-site-packages": (f"echo 'import gradelib; gradelib.check = lambda text: True' > \"{SITE}/zz.pth\"\n",
                             BY_PATH, "removed", "site-packages/zz.pth"),
    "module-beside-the-script": ("echo 'def check(text): return True' > /opt/venv/bin/gradelib.py\n", BY_PATH,
                                 "removed", "/opt/venv/bin/gradelib.py"),
    "stale-looking-bytecode": (FAKE_PYC, BY_PATH, "removed", "__pycache__/gradelib."),
}


async def run_task(tmp_path: Path, solve: str, test_sh: str, toml_extra: str = "") -> tackroom.TrialResult:
    """One real trial of the task above: the oracle runs ``solve``, test-script runs ``test_sh``."""
    name = f"t-{uuid.uuid4().hex[:6]}"
    toml = f"[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n{toml_extra}"
    task = tackroom.load_task(tackroom.testing.write_task(tmp_path / "tasks", name, test_sh=test_sh, solve_sh=solve,
                                                          toml=toml, files=FILES))
    manager = tackroom_app.PluginManager()
    oracle, verifier = manager.get("harness", "oracle"), manager.get("verifier", "test-script")
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="oracle", sandbox="local", verifier="test-script")
    plugins = TrialPlugins(oracle, oracle.Options(), LocalSandboxProvider({"root_dir": str(tmp_path / "roots")}),
                           verifier, verifier.Options())  # fmt: skip
    rt = TrialRuntime(tmp_path / f"run-{name}", progress=False, manager=manager, retry_backoff_sec=0.01, attempts=1)
    return await rt.run_trial(trial, task, plugins)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_a_tool_the_tasks_environment_installed_grades_whatever_the_agent_did_to_it(tmp_path, attack):
    solve, test_sh, done, path = ATTACKS[attack]
    result = await run_task(tmp_path, WRONG + solve, test_sh)
    assert result.error is None, result.error
    assert result.reward == 0.0, f"{attack}: the agent's change to the task's tool graded it 1 ({result.notes})"
    said = [n for n in result.notes if n.startswith("local sandbox: before grading")]
    assert said and done in said[0] and path in said[0].split(done, 1)[1], result.notes


async def test_the_true_answer_still_scores_one_and_nothing_is_put_back(tmp_path):
    result = await run_task(tmp_path, "echo 42 > /app/answer.txt\n", BY_PATH)
    assert result.error is None and result.reward == 1.0, (result.error, result.notes)
    assert not [n for n in result.notes if n.startswith("local sandbox: before grading")], result.notes


async def test_the_agents_changes_in_the_working_directory_and_grading_paths_stay(tmp_path):
    # Both files were installed by the Dockerfile (an executable in the working directory, a module under one of the
    # task's grading_paths); changing them is the task, so grading sees the agent's versions.
    solve = WRONG + "printf '#!/bin/sh\\necho 42\\n' > /app/solve_me.sh\necho 'ANSWER = 42' > /srv/lib/helper.py\n"
    test_sh = ('ok=0; [ "$(/app/solve_me.sh)" = 42 ] && [ "$(cd /srv/lib && python3 -c \'import helper; '
               'print(helper.ANSWER)\')" = 42 ] && ok=1; echo $ok > /logs/verifier/reward.txt\n')
    result = await run_task(tmp_path, solve, test_sh, 'grading_paths = ["/srv/lib"]\n')
    assert result.error is None and result.reward == 1.0, (result.error, result.notes)
    assert not [n for n in result.notes if n.startswith("local sandbox: before grading")], result.notes


# -- the sandbox itself --------------------------------------------------------------------------------------------


@pytest.fixture
async def built(tmp_path):
    """A started local sandbox of the task's environment (its Dockerfile carried out)."""
    env = tmp_path / "environment"
    for path, text in FILES.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    provider = LocalSandboxProvider({"root_dir": str(tmp_path / "roots")})
    sb = provider.create(tackroom.SandboxSpec(name="installed", environment_dir=env))
    await sb.start()
    yield sb
    await sb.stop()


def digest(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


async def tool_works(sb) -> bool:
    await sb.exec("echo 42 > /app/answer.txt")
    out = await sb.exec("/opt/venv/bin/gradetool")
    return out.stdout == "PASS\n"


async def test_links_the_agent_planted_on_recorded_paths_never_lead_a_write_out_of_the_root(built, tmp_path):
    sb = built
    host = tmp_path / "host"
    host.mkdir()
    (host / "passwd").write_text("root:x:0:0::/root:/bin/bash\n")
    copies = sorted(p for p in sb.installed.folder.iterdir())
    before = {p: digest(p) for p in [host / "passwd", *copies]}
    depth = "../" * 30
    await sb.exec(
        f"ln -sfn {host}/passwd /opt/venv/bin/gradetool; "  # the host's path: followed by the kernel, a host file
        f"site={SITE}; rm $site/gradelib.py; ln -s {depth}{str(host)[1:]}/passwd $site/gradelib.py; "
        f"ln -sfn {sb.installed.folder}/0 /opt/venv/bin/activate; "  # the record's own copy, by its host path
        f"mv /srv/lib /srv/lib.old; ln -s {host} /srv/lib"  # a folder swapped for a link to a host folder
    )  # fmt: skip
    await sb.kill_processes()
    restored = await sb.restore_image_tools(keep=["/app"])
    assert {"/opt/venv/bin/gradetool", "/opt/venv/bin/activate", "/srv/lib/helper.py"} <= set(restored), restored
    assert {p: digest(p) for p in before} == before, "a write followed a link the agent planted out of the root"
    assert sorted(os.listdir(host)) == ["passwd"], "a write landed in the host folder the agent linked"
    assert await tool_works(sb)
    assert (await sb.exec("test ! -L /srv/lib && cat /srv/lib/helper.py")).stdout == "ANSWER = 0\n"


async def test_a_folder_flipping_between_a_folder_and_a_link_while_restoring_never_leads_out(built, tmp_path):
    sb = built
    host = tmp_path / "host"
    host.mkdir()
    (host / "gradetool").write_text("host's own\n")
    before = sorted(os.listdir(host)), digest(host / "gradetool")
    # the venv's bin flips between a real folder holding a link to a host file and a link to a host folder
    await sb.exec(f"{PASS_SCRIPT} > /opt/venv/bin/gradetool; (while :; do rm -rf /opt/venv/bin; "
                  f"ln -s {host} /opt/venv/bin; rm -f /opt/venv/bin; mkdir /opt/venv/bin; "
                  f"ln -s {host}/gradetool /opt/venv/bin/gradetool; done) >/dev/null 2>&1 &")
    for _ in range(20):
        with contextlib.suppress(tackroom.SandboxError):  # "kept changing": the agent still runs, so it may
            await sb.restore_image_tools(keep=["/app"])
    await sb.kill_processes()
    assert (sorted(os.listdir(host)), digest(host / "gradetool")) == before, "a write landed in a host folder"
    await sb.restore_image_tools(keep=["/app"])
    assert await tool_works(sb)


async def test_the_record_is_what_was_installed_kept_beside_the_root_and_removed_with_the_sandbox(built):
    sb = built
    recorded = set(sb.installed.entries)
    assert {"/opt/venv/bin/gradetool", "/opt/venv/pyvenv.cfg", "/opt/venv/bin/python", "/srv/lib/helper.py"} <= recorded
    assert not any(p.startswith(("/app/", "/tmp/")) for p in recorded), "the working directory and /tmp are the agent's"
    folder = sb.installed.folder
    assert folder.parent == sb.root.parent and folder.is_dir()
    assert (await sb.exec(f"ls {folder} 2>&1 || echo unseen")).stdout.strip().endswith("unseen")
    await sb.stop()
    assert not folder.exists()


async def test_a_task_without_a_dockerfile_records_nothing(tmp_path):
    sb = LocalSandboxProvider({"root_dir": str(tmp_path / "roots")}).create(tackroom.SandboxSpec(name="bare"))
    await sb.start()
    try:
        assert sb.installed.entries == {} and not sb.installed.folder.exists()
        await sb.exec("mkdir -p /opt/bin && cp /usr/bin/true /opt/bin/grep")
        started = time.perf_counter()
        assert await sb.restore_image_tools(keep=["/app"]) == []
        assert time.perf_counter() - started < 5
    finally:
        await sb.stop()
    assert sorted(p.name for p in (tmp_path / "roots").iterdir()) == []


def test_env_substitutes_variables_as_docker_does():
    before = {"PATH": "/usr/bin:/bin", "HOME": "/root"}
    assert parse_env("PATH=/opt/venv/bin:$PATH", before) == {"PATH": "/opt/venv/bin:/usr/bin:/bin"}
    assert parse_env('A=${HOME}/x B="$HOME y" C=\'$HOME\' D=\\$HOME E=${NOPE:-dflt} F=${HOME:+set}', before) == {
        "A": "/root/x", "B": "/root y", "C": "$HOME", "D": "$HOME", "E": "dflt", "F": "set"}
    assert parse_env("LEGACY some $HOME", before) == {"LEGACY": "some /root"}


async def test_a_dockerfile_env_path_extends_the_path_it_had(tmp_path):
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text("ENV PATH=/opt/tools/bin:$PATH\nWORKDIR $HOME/work\nRUN command -v cat\n")
    sb = LocalSandboxProvider({"root_dir": str(tmp_path / "roots")}).create(
        tackroom.SandboxSpec(name="env", environment_dir=env))
    async with sb:
        assert sb.env["PATH"].startswith("/opt/tools/bin:/usr/local/sbin:") and sb.workdir == "/root/work"
        assert (await asyncio.wait_for(sb.exec("pwd"), 30)).stdout == "/root/work\n"


async def test_an_untouched_install_is_left_alone_and_only_what_the_agent_added_beside_a_script_goes(tmp_path):
    # A script with packages beside it (its folder is first on its sys.path), compiled at build: nothing of it is
    # touched; a package and a module the agent adds there (which `import` would find first) are removed.
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text(
        "RUN mkdir -p /srv/app/pkg && printf '#!/usr/bin/python3\\nimport pkg, json\\n' > /srv/app/run.py && "
        "chmod +x /srv/app/run.py && touch /srv/app/pkg/__init__.py /srv/app/notes.txt && "
        "cp -r /usr/lib/python3.11/json /srv/app/json && python3 -m compileall -q /srv/app\n"
        "ENV PATH=/srv/app:$PATH\n")
    sb = LocalSandboxProvider({"root_dir": str(tmp_path / "roots")}).create(
        tackroom.SandboxSpec(name="untouched", environment_dir=env))
    async with sb:
        await sb.kill_processes()
        assert await sb.restore_image_tools(keep=["/app"]) == []
        await sb.exec("mkdir /srv/app/evil && touch /srv/app/evil/__init__.py /srv/app/pathlib.py /srv/app/data.txt")
        removed = await sb.restore_image_tools(keep=["/app"])
        assert sorted(removed) == ["/srv/app/evil", "/srv/app/pathlib.py"], removed
        left = await sb.exec("ls /srv/app")
        assert left.stdout.split() == ["__pycache__", "data.txt", "json", "notes.txt", "pkg", "run.py"], left
