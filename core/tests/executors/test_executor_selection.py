"""Choosing an executor through the ``tackroom_executors`` hook: names, options tables, the errors a user can hit.

These run without tackroom-ray: each builds its own plugin manager, or asks only for what core registers.
The ray executor's own selection tests live in packages/ray/tests.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field

import tackroom
from tackroom._config import RuntimeConfig
from tackroom._errors import PluginConflictError
from tackroom._manager import PluginManager
from tackroom._runtime import TrialRuntime
from tackroom.executors import (
    AsyncioExecutor,
    Executor,
    ExecutorNotFoundError,
    NoOptions,
    make_executor,
)
from tackroom_app import load_run_config

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "tasks"


class CountingOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    slots: int = Field(default=1, ge=1)


class CountingExecutor(AsyncioExecutor):
    """In-process, with a cap of its own."""

    name = "counting"
    Options = CountingOptions

    def max_in_flight(self, concurrency: int) -> int:
        return self.options.slots


class CountingPlugin:
    @tackroom.hookimpl
    def tackroom_executors(self, register):
        register.add_executor(CountingExecutor)


def core_only() -> PluginManager:
    """Core's built-ins only (asyncio), whatever else is installed."""
    return PluginManager(env={"TACKROOM_LOAD_PLUGINS": ""})


def test_core_registers_asyncio_through_tackroom_executors_like_any_plugin():
    manager = core_only()
    entry = manager.registrar.executors["asyncio"]
    assert entry.distribution == "tackroom" and entry.options is NoOptions
    assert entry.load() is AsyncioExecutor
    assert isinstance(TrialRuntime(".", manager=manager, progress=False).executor, AsyncioExecutor)
    bare = PluginManager(load_entry_points=False)
    assert bare.registrar.executors == {}, "nothing is built in by hand: asyncio comes from core's entry point"


def test_a_plugin_registers_an_executor_with_its_options_model_through_tackroom_executors():
    manager = core_only()
    manager.register(CountingPlugin())
    assert sorted(manager.registrar.executors) == ["asyncio", "counting"]
    executor = make_executor("counting", {"slots": 3}, manager=manager)
    assert isinstance(executor, CountingExecutor) and executor.max_in_flight(10) == 3
    assert make_executor("counting", manager=manager).options == CountingOptions()
    assert make_executor("asyncio", CountingOptions(slots=9), manager=manager).max_in_flight(4) == 4, \
        "another executor's options wait for it"
    with pytest.raises(tackroom.ConfigError, match=r"runtime\.counting\.slots: Input should be greater"):
        make_executor("counting", {"slots": 0}, manager=manager)
    with pytest.raises(tackroom.ConfigError, match="pass executor options to the executor object itself"):
        make_executor(AsyncioExecutor(), {"slots": 2}, manager=manager)


def test_lazy_executor_registration_is_imported_only_when_built():
    class Lazy:
        @tackroom.hookimpl
        def tackroom_executors(self, register):
            register.add_executor("tackroom._executor:AsyncioExecutor", name="later", options=NoOptions)

    manager = PluginManager(load_entry_points=False)
    manager.register(Lazy())
    entry = manager.registrar.executors["later"]
    assert entry._target is None and entry.reference == "tackroom._executor:AsyncioExecutor"
    with pytest.raises(tackroom.PluginDefinitionError, match="not an Executor subclass with that name"):
        entry.load()  # the class there says name = "asyncio"


def test_bad_executor_registrations_are_refused():
    class NoName(Executor):
        name = "Bad Name"

        async def run(self, plan, *, manager, on_started):
            raise NotImplementedError

    class LooseOptions(BaseModel):
        x: int = 1

    register = tackroom.Registrar()
    with pytest.raises(tackroom.PluginDefinitionError, match="plugin name 'Bad Name' is invalid"):
        register.add_executor(NoName)
    with pytest.raises(tackroom.PluginDefinitionError, match="forbids unknown fields"):
        register.add_executor("pkg.mod:Cls", name="loose", options=LooseOptions)
    with pytest.raises(tackroom.PluginDefinitionError, match="needs|come with name="):
        register.add_executor("pkg.mod:Cls")
    register.add_executor(AsyncioExecutor)
    with pytest.raises(PluginConflictError, match="two plugins register the executor 'asyncio'"):
        register.add_executor(AsyncioExecutor)


def test_unknown_names_list_the_executors_and_ray_says_how_to_install_it():
    manager = core_only()
    with pytest.raises(ExecutorNotFoundError,
                       match=r"'dask' is not an executor; available: asyncio(\. Skipped plugins|$)"):
        make_executor("dask", manager=manager)
    with pytest.raises(ExecutorNotFoundError, match=r"available: asyncio\. .*pip install tackroom-ray"):
        make_executor("ray", manager=manager)


def test_runtime_tables_are_validated_by_the_registered_options_model(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('[runtime]\nexecutor = "asyncio"\n[runtime.asyncio]\n')
    config = load_run_config(cfg)
    assert config.runtime.executor_options() == NoOptions()
    assert RuntimeConfig().executor_options() is None
    cfg.write_text('[runtime]\nexecutor = "dask"\n')
    with pytest.raises(tackroom.ConfigError, match=r"run\.toml: runtime\.executor: 'dask' is not an executor"):
        load_run_config(cfg)
    cfg.write_text('[runtime.asyncio]\nslots = 2\n[runtime.bogus]\nx = 1\n')
    with pytest.raises(tackroom.ConfigError) as err:
        load_run_config(cfg)
    assert "runtime.asyncio.slots: unknown field" in str(err.value)
    assert "runtime.bogus: a table of executor options, but 'bogus' is not an executor; available: asyncio" \
        in str(err.value)


def test_importing_tackroom_and_running_under_asyncio_never_imports_ray():
    code = ("import sys, tackroom, tackroom._runtime, tackroom.executors, tackroom_app._cli.main\n"
            "from tackroom.executors import make_executor\n"
            "make_executor('asyncio')\n"
            "assert 'ray' not in sys.modules, 'ray was imported'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_tackroom_run_with_an_unknown_executor_names_the_ones_there_are(tmp_path):
    out = subprocess.run([sys.executable, "-m", "tackroom_app._cli.main", "run", str(EXAMPLES / "hello-file"),
                          "--executor", "dask", "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    # the flag is checked like the config field it sets, before anything runs
    assert "--executor (runtime.executor): 'dask' is not an executor; available: asyncio" in out.stderr, out.stderr
    without_ray = {**os.environ, "TACKROOM_BLOCK_PLUGINS": "tackroom-ray"}  # as if it were not installed
    out = subprocess.run([sys.executable, "-m", "tackroom_app._cli.main", "run", str(EXAMPLES / "hello-file"),
                          "--executor", "ray", "--out", str(tmp_path)], capture_output=True, text=True, timeout=120,
                         env=without_ray)
    assert out.returncode == 2, out.stderr
    assert "'ray' is not an executor; available: asyncio. The ray executor is a package of its own: " \
        "pip install tackroom-ray" in out.stderr, out.stderr


def test_parsing_a_runtime_table_asks_no_registry_and_resolving_it_does():
    from tackroom_app import resolve_runtime

    parsed = RuntimeConfig.model_validate({"executor": "dask", "bogus": {"x": 1}})  # shape only: no lookup
    assert parsed.executor == "dask"
    with pytest.raises(tackroom.ConfigError) as err:
        resolve_runtime(parsed, source="cfg.toml", manager=core_only())
    first, second = str(err.value).splitlines()[:2]
    assert first.startswith("cfg.toml: runtime.executor: 'dask' is not an executor; available: asyncio")
    assert second.startswith("cfg.toml: runtime.bogus: a table of executor options, but 'bogus' is not an executor")
