"""Selecting the ray executor, its ``[runtime.ray]`` options, and what cannot be shipped to a worker (no cluster)."""

import pickle
import subprocess
import sys

import pytest

import tackroom
import tackroom_app
from tackroom.executors import AsyncioExecutor, ExecutorUnavailableError, PluginRef, make_executor
from tackroom_app import TrialPlugins, TrialRuntime, load_run_config
from tackroom_local import LocalSandboxProvider
from tackroom_ray import PluginNotShippableError, RayOptions
from tackroom_ray.executor import RayExecutor
from tackroom_ray.shipping import check_shippable

OracleHarness = tackroom_app.get_plugin_manager().get("harness", "oracle")  # built-ins, by name
TestScriptVerifier = tackroom_app.get_plugin_manager().get("verifier", "test-script")


def test_tackroom_ray_registers_ray_lazily_through_tackroom_executors():
    entry = tackroom_app.PluginManager().registrar.executors["ray"]
    assert (entry.distribution, entry.reference, entry.options) == (
        "tackroom-ray", "tackroom_ray.executor:RayExecutor", RayOptions)
    assert entry.load() is RayExecutor


def test_runtime_ray_section_keeps_its_toml_shape_and_is_validated_with_dotted_paths(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('[runtime]\nexecutor = "ray"\n[runtime.ray]\nnum_cpus_per_trial = 0.5\nmax_concurrency = 64\n'
                   'resources = { sandbox_host = 1 }\n')
    config = load_run_config(cfg)
    assert config.runtime.executor == "ray"
    options = RayOptions(num_cpus_per_trial=0.5, max_concurrency=64, resources={"sandbox_host": 1})
    assert config.runtime.ray == options == config.runtime.executor_options()
    executor = make_executor(config.runtime.executor, config.runtime.executor_options())
    assert isinstance(executor, RayExecutor)
    assert executor.max_in_flight(4) == 64 and executor.options.num_cpus_per_trial == 0.5

    cfg.write_text('[runtime.ray]\nnum_cpus_per_trial = 0\nnum_cpu = 1\n')
    with pytest.raises(tackroom.ConfigError) as err:
        load_run_config(cfg)
    assert "runtime.ray.num_cpus_per_trial: Input should be greater than 0" in str(err.value)
    assert "runtime.ray.num_cpu: unknown field" in str(err.value)
    with pytest.raises(tackroom.ConfigError, match=r"runtime\.ray\.max_concurrency"):
        make_executor("ray", {"max_concurrency": 0})


def test_options_of_another_executor_wait_for_it(tmp_path):
    """``[runtime.ray]`` in a config whose executor is asyncio is not an error."""
    runtime = TrialRuntime(tmp_path, executor="asyncio", executor_options=RayOptions(max_concurrency=9))
    assert isinstance(runtime.executor, AsyncioExecutor) and runtime.executor.max_in_flight(3) == 3


def test_a_missing_ray_says_how_to_install_it(monkeypatch):
    from tackroom_ray.executor import import_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` sees when Ray is not installed
    with pytest.raises(ExecutorUnavailableError, match=r"pip install tackroom-ray"):
        import_ray()


def test_tackroom_never_imports_ray_unless_the_ray_executor_runs():
    code = ("import sys, tackroom, tackroom_app, tackroom.executors, tackroom_app.__main__\n"
            "from tackroom.executors import make_executor\n"
            "make_executor('ray', {'num_cpus_per_trial': 1})\n"
            "assert 'ray' not in sys.modules, 'ray was imported'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_plugins_a_worker_cannot_import_are_refused_before_anything_runs():
    def local_class():
        class Local(OracleHarness):
            """Defined inside a function."""

            name = "local-one"

        return Local

    with pytest.raises(PluginNotShippableError, match=r"cannot be imported by a worker process; define it at module"):
        check_shippable(PluginRef.of(local_class(), {}))
    main_class = type("Main", (OracleHarness,), {"name": "main-one", "__module__": "__main__", "__doc__": "x"})
    with pytest.raises(PluginNotShippableError, match="__main__"):
        check_shippable(PluginRef.of(main_class, {}))
    elsewhere = type("Gone", (OracleHarness,), {"name": "gone", "__module__": "no_such_module_here", "__doc__": "x"})
    with pytest.raises(PluginNotShippableError, match="no_such_module_here:Gone does not import back"):
        check_shippable(PluginRef.of(elsewhere, {}))
    check_shippable(PluginRef.of(OracleHarness, {}))


def test_built_in_plugins_ship_by_reference_and_come_back_equal(manager, tmp_path):
    provider = LocalSandboxProvider({"root_dir": "/tmp/somewhere", "output_limit_bytes": 4096})
    plugins = TrialPlugins(OracleHarness, OracleHarness.Options(max_output_chars=10), provider,
                           TestScriptVerifier, TestScriptVerifier.Options())
    (tmp_path / "t" / "tests").mkdir(parents=True)
    (tmp_path / "t" / "instruction.md").write_text("Say hi")
    task = tackroom.load_task(tmp_path / "t")
    trial = tackroom.Trial(task_id=task.id, task_path=str(task.path), harness="oracle", sandbox="local",
                           verifier="test-script")
    runtime = TrialRuntime(tmp_path / "run", progress=False, setup_timeout_sec=7, teardown_timeout_sec=9)
    plan = runtime.plan(trial, task, plugins, 2)
    assert plan.sandbox.provider(manager) is provider, "in this process the plan carries the live provider"
    shipped = pickle.loads(pickle.dumps(plan))  # what a worker gets: references, no live objects
    assert shipped.model_dump() == plan.model_dump() and shipped.time_limit == runtime.deadlines.time_limit(task)
    assert (shipped.attempt, shipped.deadlines.setup_timeout_sec, shipped.deadlines.teardown_timeout_sec) == (2, 7, 9)
    assert shipped.harness.reference == f"{OracleHarness.__module__}:{OracleHarness.__qualname__}"
    assert shipped.sandbox.name == "local" and shipped.sandbox.options["output_limit_bytes"] == 4096
    full = tackroom_app.PluginManager()
    for ref, cls, options in ((shipped.harness, OracleHarness, plugins.harness_options),
                              (shipped.sandbox, LocalSandboxProvider, provider.options),
                              (shipped.verifier, TestScriptVerifier, plugins.verifier_options)):
        assert ref.load(full) is cls, "resolved through the plugin manager"
        assert ref.load(manager) is cls, "resolved by import when the manager does not know the name"
        assert ref.resolve(manager) == (cls, options)
    built = shipped.sandbox.provider(manager)
    assert built is not provider and built.options == provider.options, "a worker builds its own provider"
    assert shipped.sandbox.provider(manager) is built, "and keeps it for its later attempts"
