"""The lifecycle hooks as pluggy delivers them (the trial runtime's own tests call them end to end)."""

import types

import tackroom
from tackroom._manager import PluginManager


def test_tackroom_classify_error_first_result_wins(manager):
    calls = []

    def says_nothing(error, phase):
        calls.append("nothing")
        return None

    def says_task(error, phase):
        calls.append("task")
        return "task" if isinstance(error, KeyError) else None

    for i, fn in enumerate([says_nothing, says_task]):
        mod = types.ModuleType(f"m{i}")
        mod.tackroom_classify_error = tackroom.hookimpl(fn)
        manager.register(mod)
    assert manager.hook.tackroom_classify_error(error=KeyError("x"), phase="verify") == "task"
    assert manager.hook.tackroom_classify_error(error=ValueError("x"), phase="verify") is None
    assert "nothing" in calls


def test_tackroom_trial_started_and_tackroom_trial_finished_reach_plugins(manager):
    seen = []
    mod = types.ModuleType("observer")
    mod.tackroom_trial_started = tackroom.hookimpl(lambda trial: seen.append(("start", trial)))
    mod.tackroom_trial_finished = tackroom.hookimpl(lambda trial, result: seen.append(("end", trial, result)))
    manager.register(mod)
    manager.hook.tackroom_trial_started(trial="t1")
    manager.hook.tackroom_trial_finished(trial="t1", result="r1")
    assert seen == [("start", "t1"), ("end", "t1", "r1")]


def test_tackroom_commands_adds_a_sub_command(manager):
    import typer
    from typer.testing import CliRunner

    app = typer.Typer()

    @app.command()
    def existing() -> None:
        """An existing command."""

    def add(app):
        @app.command("greet")
        def greet(name: str) -> None:
            typer.echo(f"hi {name}")

    mod = types.ModuleType("cmds")
    mod.tackroom_commands = tackroom.hookimpl(add)
    manager.register(mod)
    manager.hook.tackroom_commands(app=app)
    result = CliRunner().invoke(app, ["greet", "ada"])
    assert result.exit_code == 0 and result.output.strip() == "hi ada"


def test_tackroom_commands_a_broken_plugin_does_not_take_the_cli_down(monkeypatch):
    from tackroom_app._cli import main as cli_main

    manager = PluginManager(load_entry_points=False)

    def broken(app):
        raise ImportError("no module named heavy_sdk")

    mod = types.ModuleType("broken_cmds")
    mod.tackroom_commands = tackroom.hookimpl(broken)
    manager.register(mod, name="broken-cmds")
    monkeypatch.setattr("tackroom._manager._manager", manager)
    cli_main.load_plugin_commands()  # logs a warning, raises nothing
