"""Fixtures shared by every test directory of the workspace."""

from __future__ import annotations

import os

import pytest

from tackroom.testing import skip_or_fail


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "engine: needs the real local engine; skipped with a reason locally, fails under CI",
    )


@pytest.fixture(scope="session")
def engine_url() -> str:
    """The real local engine's OpenAI base URL.

    ``TACKROOM_ENGINE_URL`` when set, else the engine ``tackroom model up``
    started (``scripts/setup`` starts it). Locally a missing engine skips the
    test with a reason; under CI (``CI=true``) it is a failure.
    """
    url = os.environ.get("TACKROOM_ENGINE_URL")
    if url:
        return url.rstrip("/")
    from tackroom_engine import running_engine_url

    url = running_engine_url()
    if url:
        return url
    skip_or_fail("no local engine: run `tackroom model up` (or set TACKROOM_ENGINE_URL)")


# -- parallel runs (pytest-xdist: `-n 4 --dist loadgroup --no-loadscope-reorder` in pyproject's addopts) --
#
# Every test of a module runs on one worker, so module- and session-scoped fixtures (a gateway, a Ray
# cluster, an OpenCode install) are built once. Tests that share something exclusive across modules run on
# one worker together: everything that needs Docker (image builds and removals, `sandbox cleanup` of
# leaked containers) is the `docker` group; the trainer tests that start engines and JAX servers are the
# `trainer` group (memory). Groups are handed out in collection order, and the collection
# is reordered so that the longest groups start first: the run lasts about as long as its longest group
# instead of a one-test module that took ten minutes starting last (xdist's own reorder, by test count,
# put exactly those last). docs/testing.md has the figures behind the list.

LONGEST_FIRST = (
    "trainer",
    "docker",
    "packages/train/tests/test_gpu_jax_step.py",
    "plugins/harnesses/opencode/tests/test_conformance.py",
    "packages/gateway/tests/test_engine_e2e.py",
    "packages/ray/tests/test_ray_executor.py",
    "packages/gateway/tests/test_tokenizer_threads.py",
    "plugins/harnesses/opencode/tests/test_real_engine.py",
    "plugins/harnesses/terminus/tests/test_engine_e2e.py",
    "packages/gateway/tests/test_gateway_cli.py",
    "plugins/harnesses/archipelago/tests/test_conformance.py",
    "packages/matrix/tests/test_matrix_cmd.py",
)
EXCLUSIVE = {
    "docker": ("packages/app/tests/test_sandbox_cmd.py", "plugins/sandboxes/docker/"),
    # each starts a vLLM engine and/or SkyRL's JAX server (3-7 GB apiece): run together they filled the
    # 24 GB machine and Ray's memory monitor killed other tests' workers. Two of them share one Tinker server
    # (skyrl's conftest.py). The GPU-step smoke (a 2-layer model in JAX, ~1 GB) is not one of them: in this
    # group it made the group, the suite's longest, 7 minutes longer; it runs beside it on its own.
    "trainer": tuple(f"packages/train/tests/test_{name}.py" for name in (
        "tinker_overfit", "tinker_policy", "engine_sampling", "policy_serving", "sft_tinker",
        "mixed_harness_tinker")),
}

# The inner-loop tier is `uv run pytest -m "not slow"`: besides tests marked `slow` by hand, everything that
# needs Docker, the real engine, the Tinker server or a hosted service is slow by definition.
SLOW_BY_NEED = ("docker", "engine", "tinker", "live")


def _group(item: pytest.Item) -> str:
    path = item.nodeid.split("::", 1)[0]
    if item.get_closest_marker("docker") or any(path.startswith(p) for p in EXCLUSIVE["docker"]):
        return "docker"
    if path in EXCLUSIVE["trainer"]:
        return "trainer"
    return path


@pytest.hookimpl(tryfirst=True)  # before xdist's worker hook, which reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(name) for name in SLOW_BY_NEED) or "engine_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(_group(item)))
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}

    def order(item: pytest.Item) -> int:
        mark = item.get_closest_marker("xdist_group")
        name = (mark.args[0] if mark.args else mark.kwargs.get("name")) if mark else ""
        return rank.get(name, len(rank))

    items.sort(key=order)  # stable: within a rank, collection order


# -- CPU per test: the suite is bound by this machine's two cores, so "what costs CPU" steers more than --durations
#
# Each test's CPU is what its worker process and the children it reaped (subprocesses, engines and servers it
# stopped and waited for) used from its setup to its teardown. Docker containers, Ray's workers and the shared
# engine are not in it. The 20 hungriest are listed at the end of the run beside pytest's --durations.

CPU_PROPERTY = "cpu_s"


def _cpu_seconds() -> float:
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_CPU_AT_SETUP = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item):
    item.stash[_CPU_AT_SETUP] = _cpu_seconds()
    yield


_CPU_BEFORE_LAST_TEARDOWN = pytest.StashKey[float]()
SESSION_TEARDOWN_PROPERTY = "session_teardown_cpu_s"


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    # The worker's last test also tears down the session's fixtures (a shared Tinker server, for one): their CPU
    # and their children's is listed on its own line, not charged to that test.
    if nextitem is None:
        item.stash[_CPU_BEFORE_LAST_TEARDOWN] = _cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    if call.when == "teardown" and _CPU_AT_SETUP in item.stash:
        report, now = outcome.get_result(), _cpu_seconds()
        if _CPU_BEFORE_LAST_TEARDOWN in item.stash:
            report.user_properties.append((SESSION_TEARDOWN_PROPERTY, now - item.stash[_CPU_BEFORE_LAST_TEARDOWN]))
            now = item.stash[_CPU_BEFORE_LAST_TEARDOWN]
        report.user_properties.append((CPU_PROPERTY, now - item.stash[_CPU_AT_SETUP]))
        report.user_properties.extend((LEFT_PROPERTY, child) for child in _children_left_behind())


# -- processes left behind: a child of the worker that outlives its test runs on (a busy one eats CPU no test is
# charged for) until something reaps it, and whatever test runs then is charged all its CPU at once. That is what
# made two tiny rubric-judge tests look like ~200 CPU-s apiece (docs/testing.md). So the end of the run lists every
# child process a test started and left running, or exited but unreaped, at its teardown.

LEFT_PROPERTY = "left_behind"
_KNOWN_CHILDREN: set[int] = set()


def _children_left_behind() -> list[str]:
    """'pid state command' of each child of this process that was not there at the previous test's teardown."""
    me, now = str(os.getpid()), {}
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                state, ppid = f.read().rsplit(b")", 1)[1].split(None, 2)[:2]
            if ppid.decode() != me:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
            if not command:  # a zombie has no command line left, only its name
                with open(f"/proc/{pid}/comm", "rb") as f:
                    command = f"[{f.read().decode(errors='replace').strip()}]"
        except (OSError, ValueError):
            continue
        now[int(pid)] = f"{pid} {state.decode()} {command}"
    new = [line for pid, line in sorted(now.items()) if pid not in _KNOWN_CHILDREN]
    _KNOWN_CHILDREN.clear()
    _KNOWN_CHILDREN.update(now)
    return new


_CPU_BY_TEST: dict[str, float] = {}
_LEFT_BY_TEST: dict[str, list[str]] = {}
_SESSION_TEARDOWNS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for key, value in report.user_properties:
        if key == CPU_PROPERTY and report.when == "teardown":
            _CPU_BY_TEST[report.nodeid] = float(value)
        if key == SESSION_TEARDOWN_PROPERTY and report.when == "teardown":
            _SESSION_TEARDOWNS[report.nodeid] = float(value)
        if key == LEFT_PROPERTY and report.when == "teardown":
            _LEFT_BY_TEST.setdefault(report.nodeid, []).append(str(value))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not _CPU_BY_TEST:
        return
    total = sum(_CPU_BY_TEST.values()) + sum(_SESSION_TEARDOWNS.values())
    terminalreporter.write_sep("=", f"CPU per test: {total:.0f} s in all; the 20 hungriest")
    for nodeid, seconds in sorted(_CPU_BY_TEST.items(), key=lambda kv: -kv[1])[:20]:
        terminalreporter.write_line(f"{seconds:8.1f}s cpu  {nodeid}")
    for nodeid, seconds in _SESSION_TEARDOWNS.items():
        terminalreporter.write_line(f"{seconds:8.1f}s cpu  (session fixtures' teardown on the worker, after {nodeid})")
    if _LEFT_BY_TEST:
        terminalreporter.write_sep("=", "child processes left behind at a test's teardown (pid, state Z = unreaped)")
        for nodeid, children in _LEFT_BY_TEST.items():
            terminalreporter.write_line(nodeid)
            for child in children:
                terminalreporter.write_line(f"    {child}")
