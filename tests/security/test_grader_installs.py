"""Attacks on the grader's own installs and on what its tools discover (issue 46, item 1): Terminal-Bench-style
test.sh files install their test tools when grading starts (``pip install pytest==…``, ``uvx … pytest``,
``apt-get install``); an agent that cannot solve its task leaves package-manager configuration where those installs
look (pointing them at a folder of its own wheels holding a fake ``pytest`` that always passes, or at an apt
repository of its own), or pytest configuration above ``/tests``. Each attack scored 1.0 on docker before the fix
(the virtualenv and working-directory ones on local too). docs/threat-model.md, "The grader's installs".

Each test is a real trial on ``local`` and, where a Docker engine answers, on ``docker`` (image
``python:3.13-slim-bookworm``, built by /work/shared/tools/tb2-python-base.sh), with the real pip of the image and a
real uv binary shipped with the task's tests (as TB2 tasks install it, offline here). The tests fail unless
/app/answer.txt says 42, and the attack never writes 42: every variant must score 0, never 1.
"""

from __future__ import annotations

import io
import shlex
import shutil
import subprocess
import uuid
import zipfile
from pathlib import Path

import pytest

import tackroom
import tackroom.testing
import tackroom_app
from tackroom._builtins.oracle_harness import OracleHarness
from tackroom._builtins.test_script_verifier import TestScriptVerifier
from tackroom._runtime import TrialPlugins, TrialRuntime
from tackroom._trial import Trial
from tackroom_local import LocalSandboxProvider

IMAGE = "python:3.13-slim-bookworm"
TEST_OUTPUTS = "def test_answer():\n    assert open('/app/answer.txt').read().strip() == '42'\n"
REWARD = "\nif [ $? -eq 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"

# test.sh shapes taken from /work/shared/tb2-sample (headless-terminal: pip; the others: uvx); the venv shape is
# the same install into a virtualenv folder test.sh creates.
PIP_SYSTEM = "pip install pytest==8.4.1\npytest /tests/test_outputs.py -rA" + REWARD
PIP_VENV = "python3 -m venv /tmp/grader-venv && /tmp/grader-venv/bin/pip install pytest==8.4.1 && " \
           "/tmp/grader-venv/bin/pytest /tests/test_outputs.py -rA" + REWARD
UVX = "/tests/uv tool run -w pytest==8.4.1 pytest /tests/test_outputs.py -rA" + REWARD
UV_VENV = "/tests/uv venv /tmp/grader-venv && /tests/uv pip install -p /tmp/grader-venv pytest==8.4.1 && " \
          "/tmp/grader-venv/bin/pytest /tests/test_outputs.py -rA" + REWARD

WHEELS = "mkdir -p /opt/wheels && cp /solution/*.whl /opt/wheels/ && echo wrong > /app/answer.txt\n"
PIP_CONF = "[global]\nno-index = true\nfind-links = /opt/wheels\n"
UV_TOML = 'no-index = true\nfind-links = ["/opt/wheels"]\n'


def plant(path: str, text: str) -> str:
    return WHEELS + f"mkdir -p $(dirname {path}) && printf '%s' '{text}' > {path}\n"


# name: (test.sh, the agent's "solution"). On local, /etc is the host's, read-only: the plant fails there and the
# trial must score 0 all the same. uvx (`uv tool run`) reads only the user's and the system's uv.toml,
# `uv venv` / `uv pip` the working directory's too.
VARIANTS = {
    "pip.conf in the virtualenv folder test.sh creates": (PIP_VENV, plant("/tmp/grader-venv/pip.conf", PIP_CONF)),
    "uv.toml in the working directory": (UV_VENV, plant("/app/uv.toml", UV_TOML)),
    "[tool.uv] in the working directory's pyproject.toml": (
        UV_VENV, plant("/app/pyproject.toml", "[tool.uv]\n" + UV_TOML)),
    "/etc/pip.conf": (PIP_SYSTEM, plant("/etc/pip.conf", PIP_CONF)),
    "/etc/xdg/pip/pip.conf": (PIP_SYSTEM, plant("/etc/xdg/pip/pip.conf", PIP_CONF)),
    "/etc/uv/uv.toml": (UVX, plant("/etc/uv/uv.toml", UV_TOML)),
}

APT_TEST = "apt-get update\napt-get install -y curl\n" \
           "if grep -qx 42 /app/answer.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
"""test.sh as TB2 writes it (apt-get update; apt-get install -y curl), then a check that uses grep."""
APT_REPO = r"""
echo wrong > /app/answer.txt
mkdir -p /opt/repo/pkg/DEBIAN /opt/repo/pkg/usr/local/bin && cd /opt/repo || exit 1
printf 'Package: curl\nVersion: 99.0\nArchitecture: all\nMaintainer: a <a@example.com>\nDescription: x\n' > pkg/DEBIAN/control
printf '#!/bin/sh\nexit 0\n' > pkg/usr/local/bin/grep && chmod 755 pkg/usr/local/bin/grep
dpkg-deb --build pkg curl_99.0_all.deb >/dev/null || exit 1
printf 'Package: curl\nVersion: 99.0\nArchitecture: all\nMaintainer: a <a@example.com>\nFilename: ./curl_99.0_all.deb\nSize: %s\nSHA256: %s\nDescription: x\n\n' \
    "$(stat -c %s curl_99.0_all.deb)" "$(sha256sum curl_99.0_all.deb | cut -d' ' -f1)" > Packages
mkdir -p /etc/apt/sources.list.d && echo 'deb [trusted=yes] file:/opt/repo ./' > /etc/apt/sources.list.d/agent.list
"""
"""The agent's own apt repository: a "curl" 99.0 whose package installs an always-true grep earlier on PATH."""


async def test_an_apt_source_the_agent_added_does_not_serve_the_graders_apt_get_install(tmp_path, sandbox_name,
                                                                                         uv_binary):
    result = await run_trial(tmp_path, sandbox_name, APT_TEST, APT_REPO, uv_binary)
    assert result.reward == 0.0, "apt-get install in test.sh installed the agent's package from its own source"
    assert result.error is None or result.error.error_class == "model", result.error


def fake_wheel(name: str, version: str, files: dict[str, str], scripts: str = "") -> tuple[str, bytes]:
    """A pure-Python wheel, made by hand (the agent's own package index)."""
    dist = f"{name.replace('-', '_')}-{version}"
    body = {**files, f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
            f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: agent\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    if scripts:
        body[f"{dist}.dist-info/entry_points.txt"] = f"[console_scripts]\n{scripts}\n"
    body[f"{dist}.dist-info/RECORD"] = "".join(f"{p},,\n" for p in [*body, f"{dist}.dist-info/RECORD"])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, text in body.items():
            z.writestr(path, text)
    return f"{dist}-py3-none-any.whl", buf.getvalue()


FAKE_PYTEST = fake_wheel("pytest", "8.4.1", {
    "pytest/__init__.py": "",
    "pytest/__main__.py": "import sys\ndef main():\n    print('FAKE PYTEST: all passed')\n    return 0\n"
                          "if __name__ == '__main__':\n    sys.exit(main())\n",
}, scripts="pytest = pytest.__main__:main\npy.test = pytest.__main__:main")


HONEST_PYTEST = fake_wheel("pytest", "8.4.1", {
    "pytest/__init__.py": "",
    "pytest/__main__.py": "import runpy, sys\n"
                          "def main():\n"
                          "    failed = 0\n"
                          "    for path in [a for a in sys.argv[1:] if a.endswith('.py')]:\n"
                          "        for name, fn in runpy.run_path(path).items():\n"
                          "            if name.startswith('test_') and callable(fn):\n"
                          "                try:\n"
                          "                    fn(); print('PASSED', name)\n"
                          "                except Exception as exc:\n"
                          "                    failed += 1; print('FAILED', name, repr(exc))\n"
                          "    return 1 if failed else 0\n",
}, scripts="pytest = pytest.__main__:main")
"""A stand-in for pytest that really runs the tests: the index the task's image configured serves it."""


def _docker_problem() -> str | None:
    try:
        out = subprocess.run(["docker", "image", "inspect", IMAGE, "--format", "ok"], capture_output=True, text=True,
                             timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        return f"no Docker engine ({exc})"
    if out.returncode != 0:
        return f"no {IMAGE} image (bash /work/shared/tools/tb2-python-base.sh builds it): {out.stderr.strip()[:200]}"
    return None


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def sandbox_name(request) -> str:
    if request.param == "docker" and (problem := _docker_problem()):
        tackroom.testing.skip_or_fail(problem)
    return request.param


@pytest.fixture(scope="module")
def uv_binary() -> bytes:
    """The uv that test.sh runs (TB2's test.sh files `pip install uv`; offline here, the task ships it)."""
    found = shutil.which("uv")
    if found is None:
        tackroom.testing.skip_or_fail("no uv binary on this machine to ship with the task's tests")
    shim = subprocess.run(["pyenv", "which", "uv"], capture_output=True, text=True) if shutil.which("pyenv") else None
    path = Path(shim.stdout.strip()) if shim is not None and shim.returncode == 0 else Path(found)
    return path.read_bytes()


async def run_trial(tmp_path: Path, sandbox: str, test_sh: str, solve_sh: str, uv: bytes,
                    dockerfile: str = "", environment: dict[str, str | bytes] | None = None,
                    extra: dict[str, bytes] | None = None) -> tackroom.TrialResult:
    name = f"t-{uuid.uuid4().hex[:6]}"
    wheel_name, wheel = FAKE_PYTEST
    files: dict[str, str | bytes] = {
        "tests/test_outputs.py": TEST_OUTPUTS, f"solution/{wheel_name}": wheel,
        "environment/Dockerfile": f"FROM {IMAGE}\nWORKDIR /app\n{dockerfile}",
        **{f"environment/{k}": v for k, v in (environment or {}).items()}, **(extra or {}),
    }
    if "/tests/uv" in test_sh:
        files["tests/uv"] = uv
    task_dir = tackroom.testing.write_task(tmp_path / "tasks", name, test_sh="#!/bin/bash\n" + test_sh,
                                           solve_sh=solve_sh, files=files,
                                           toml="[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 120\n")
    if (task_dir / "tests" / "uv").exists():
        (task_dir / "tests" / "uv").chmod(0o755)
    task = tackroom.load_task(task_dir)
    if sandbox == "local":
        provider = LocalSandboxProvider({"root_dir": str(tmp_path / "roots")})
    else:
        from tackroom_docker import DockerProvider

        provider = DockerProvider()
    plugins = TrialPlugins(OracleHarness, OracleHarness.Options(), provider, TestScriptVerifier,
                           TestScriptVerifier.Options())
    rt = TrialRuntime(tmp_path / f"run-{name}", progress=False, manager=tackroom_app.PluginManager(),
                      retry_backoff_sec=0.01, attempts=1)
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="oracle", sandbox=sandbox, verifier="test-script")
    return await rt.run_trial(trial, task, plugins)


@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_package_manager_configuration_the_agent_left_does_not_steer_the_graders_installs(
        tmp_path, sandbox_name, variant, uv_binary):
    test_sh, solve_sh = VARIANTS[variant]
    result = await run_trial(tmp_path, sandbox_name, test_sh, solve_sh, uv_binary)
    assert result.reward == 0.0, f"{variant}: the agent's fake pytest graded an unsolved task {result.reward}"
    assert result.error is None or result.error.error_class == "model", result.error


# -- the image's own configuration still applies ----------------------------------------------------------------

IMAGE_CONFIG = """\
COPY wheels/ /opt/image-wheels/
RUN printf '[global]\\nno-index = true\\nfind-links = /opt/image-wheels\\n' > /etc/pip.conf && mkdir -p /etc/uv && \\
    printf 'no-index = true\\nfind-links = ["/opt/image-wheels"]\\n' > /etc/uv/uv.toml
"""
"""The task's image points pip and uv at its own wheel folder (a mirror, as images behind a proxy do)."""


@pytest.mark.docker
@pytest.mark.parametrize("shape", ["pip", "pip in a venv", "uvx"])
async def test_the_package_sources_the_tasks_image_configured_still_serve_the_grader(tmp_path, shape, uv_binary):
    if problem := _docker_problem():
        tackroom.testing.skip_or_fail(problem)
    test_sh = {"pip": PIP_SYSTEM, "pip in a venv": PIP_VENV, "uvx": UVX}[shape]
    wheel_name, wheel = HONEST_PYTEST
    env = {f"wheels/{wheel_name}": wheel}
    solved = await run_trial(tmp_path, "docker", test_sh, "echo 42 > /app/answer.txt", uv_binary, IMAGE_CONFIG, env)
    assert (solved.error, solved.reward) == (None, 1.0), solved.reward_details
    # the agent points the image's own files at its fake: they come back as the image made them
    attack = WHEELS + f"printf '%s' '{PIP_CONF}' > /etc/pip.conf; printf '%s' '{UV_TOML}' > /etc/uv/uv.toml\n"
    tampered = await run_trial(tmp_path, "docker", test_sh, attack, uv_binary, IMAGE_CONFIG, env)
    assert tampered.reward == 0.0, f"{shape}: the agent's change to the image's package configuration was used"


# -- what pytest discovers on its own ------------------------------------------------------------------------

OWN_PYTEST = "python3 -m venv /tmp/grader-venv && " \
             "/tmp/grader-venv/bin/pip install -q --no-index --find-links /tests/wheels pytest==8.4.1 && " \
             "/tmp/grader-venv/bin/pytest /tests/test_outputs.py -rA" + REWARD
"""test.sh installing the real pytest from the task's own wheels (offline) and running it on /tests."""


@pytest.fixture(scope="module")
def pytest_wheels() -> dict[str, bytes]:
    """Real pytest 8.4.1 and its dependencies (pure-Python wheels), downloaded from PyPI once per machine."""
    cache = Path.home() / ".cache" / "tackroom-tests" / "pytest-8.4.1-wheels"
    if not list(cache.glob("pytest-*.whl")):
        cache.mkdir(parents=True, exist_ok=True)
        pip = shutil.which("pip3") or shutil.which("pip")
        if pip is None:
            tackroom.testing.skip_or_fail("no pip on this machine to download pytest's wheels with")
        got = subprocess.run([pip, "download", "-q", "--only-binary=:all:", "--python-version",
                              "3.11", "--dest", str(cache), "pytest==8.4.1"], capture_output=True, text=True, timeout=300)
        if got.returncode != 0:
            tackroom.testing.skip_or_fail(f"could not download pytest's wheels from PyPI: {got.stderr[-300:]}")
    return {f"tests/wheels/{w.name}": w.read_bytes() for w in cache.glob("*.whl")}


PASS_ALL = ("import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
            "    out = yield\n    out.get_result().outcome = 'passed'\n")
"""A conftest.py that reports every test passed."""
ROOT_FILES = {
    "/pytest.ini": {"/pytest.ini": "[pytest]\naddopts = --collect-only -q\n"},
    "/pyproject.toml": {"/pyproject.toml": "[tool.pytest.ini_options]\naddopts = \"--collect-only -q\"\n"},
    "/conftest.py with /tox.ini": {"/tox.ini": "[pytest]\n", "/conftest.py": PASS_ALL},
    "/conftest.py with /setup.cfg": {"/setup.cfg": "[tool:pytest]\n", "/conftest.py": PASS_ALL},
}
"""pytest's rootdir and configuration come from /tests and the folders above it (only /): what the agent leaves
at / sets pytest's options (``--collect-only`` exits 0 having run nothing) or loads its conftest.py."""


@pytest.mark.parametrize("planted", list(ROOT_FILES))
async def test_pytest_configuration_the_agent_left_above_the_tests_does_not_steer_pytest(
        tmp_path, sandbox_name, planted, uv_binary, pytest_wheels):
    files = ROOT_FILES[planted]
    solve = "echo wrong > /app/answer.txt\n" + "".join(
        f"printf '%s' {shlex.quote(text)} > {path}\n" for path, text in files.items())
    result = await run_trial(tmp_path, sandbox_name, OWN_PYTEST, solve, uv_binary, extra=pytest_wheels)
    assert result.reward == 0.0, f"{planted} steered the grader's pytest: {result.reward_details}"
    assert result.error is None or result.error.error_class == "model", result.error


async def test_the_real_pytest_from_the_tasks_own_wheels_still_grades(tmp_path, sandbox_name, uv_binary,
                                                                      pytest_wheels):
    result = await run_trial(tmp_path, sandbox_name, OWN_PYTEST, "echo 42 > /app/answer.txt\n", uv_binary,
                             extra=pytest_wheels)
    assert (result.error, result.reward) == (None, 1.0), result.reward_details


# -- test tooling the agent installed ---------------------------------------------------------------------------

PLUGIN_WHEEL = fake_wheel("pytest-passall", "1.0", {"passall.py": PASS_ALL})
SYSTEM_PYTEST = "pip install -q --no-index --find-links /tests/wheels pytest==8.4.1 && " \
                "pytest /tests/test_outputs.py -rA" + REWARD
"""test.sh as headless-terminal's: pip install pytest==8.4.1 into the image's interpreter (offline: the task's
wheels), then the pytest on PATH."""


def with_entry_point(wheel: tuple[str, bytes], section: str) -> tuple[str, bytes]:
    """``wheel`` with an ``entry_points.txt`` holding ``section`` (a pytest plugin's registration)."""
    name, data = wheel
    src, buf = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(buf, "w") as out:
        for item in src.namelist():
            out.writestr(item, src.read(item))
        out.writestr(f"{name.split('-py3')[0]}.dist-info/entry_points.txt", section)
    return name, buf.getvalue()


TOOLING = {
    # a fake pytest==8.4.1 in the image's site-packages: test.sh's own install finds it "already satisfied"
    "a fake pytest in the image's interpreter": (
        SYSTEM_PYTEST, "echo wrong > /app/answer.txt\npip install -q --no-deps /solution/pytest-8.4.1-py3-none-any.whl\n"),
    # a pytest plugin of the agent's, loaded by whatever pytest test.sh installs (pytest11 entry point)
    "a pytest plugin in the image's interpreter": (
        SYSTEM_PYTEST, "echo wrong > /app/answer.txt\npip install -q --no-deps /solution/pytest_passall-1.0-py3-none-any.whl\n"),
    # the virtualenv folder test.sh is about to create, made first with a fake pytest in it (venv keeps it)
    "a fake pytest in the virtualenv test.sh creates": (
        OWN_PYTEST, "echo wrong > /app/answer.txt\npython3 -m venv /tmp/grader-venv && "
                    "/tmp/grader-venv/bin/pip install -q --no-deps /solution/pytest-8.4.1-py3-none-any.whl\n"),
}


@pytest.mark.parametrize("variant", list(TOOLING))
async def test_test_tooling_the_agent_installed_is_not_what_grades(tmp_path, sandbox_name, variant, uv_binary,
                                                                   pytest_wheels):
    test_sh, solve_sh = TOOLING[variant]
    plugin_name, plugin = with_entry_point(PLUGIN_WHEEL, "[pytest11]\npassall = passall\n")
    extra = {**pytest_wheels, f"solution/{plugin_name}": plugin}
    result = await run_trial(tmp_path, sandbox_name, test_sh, solve_sh, uv_binary, extra=extra)
    assert result.reward == 0.0, f"{variant}: the agent's test tooling graded an unsolved task {result.reward_details}"
    assert result.error is None or result.error.error_class == "model", result.error
    if sandbox_name == "docker" or "virtualenv" in variant:  # on local the image's interpreter is read-only /usr
        assert any("uninstalled test tooling the agent installed" in n for n in result.notes), result.notes
    if "interpreter" in variant and sandbox_name == "local":
        return  # test.sh's pip install into the host's read-only /usr cannot grade a solved task either
    solved = await run_trial(tmp_path, sandbox_name, test_sh, "echo 42 > /app/answer.txt\n", uv_binary, extra=extra)
    assert (solved.error, solved.reward) == (None, 1.0), solved.reward_details
