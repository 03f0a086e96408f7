"""``TACKROOM_TRACE_PLUGINS`` (datasette's ``DATASETTE_TRACE_PLUGINS``): set, every hook call is a line on stderr
with the hook's name, the plugins called, a summary of the arguments and how long it took."""

from __future__ import annotations

import re
import subprocess
import sys
import types

import tackroom
from tackroom._manager import PluginManager  # core's own, wherever the drivers' API re-exports it

LINE = re.compile(r"^tackroom hook (?P<hook>\w+)\((?P<args>.*)\) -> (?P<plugins>.+): (?P<ms>\d+\.\d) ms$")


class EchoHarness(tackroom.Harness):
    """Says the instruction back."""

    name = "echo-traced"

    async def run(self, task, sandbox, policy):
        return tackroom.Trajectory(final_answer=task.instruction)


def traced_plugin() -> types.ModuleType:
    plugin = types.ModuleType("tackroom_traced")
    plugin.tackroom_harnesses = tackroom.hookimpl(lambda register: register.add_harness(EchoHarness))
    plugin.tackroom_classify_error = tackroom.hookimpl(lambda error, phase: "model" if phase == "harness_run" else None)
    return plugin


def traced_lines(text: str) -> list[re.Match]:
    return [m for line in text.splitlines() if (m := LINE.match(line))]


def test_every_hook_call_is_traced_with_its_plugin_arguments_and_time(capsys):
    manager = PluginManager(load_entry_points=False, env={"TACKROOM_TRACE_PLUGINS": "1"})
    manager.register(traced_plugin(), name="tackroom-traced:traced")
    assert manager.entry("harness", "echo-traced").loaded
    assert manager.hook.tackroom_classify_error(error=TimeoutError("slow model"), phase="harness_run") == "model"

    calls = {m["hook"]: m for m in traced_lines(capsys.readouterr().err)}
    registration, classify = calls["tackroom_harnesses"], calls["tackroom_classify_error"]
    assert registration["plugins"] == "tackroom-traced:traced" and registration["args"].startswith("register=")
    assert classify["plugins"] == "tackroom-traced:traced"
    assert "error=TimeoutError('slow model')" in classify["args"] and "phase='harness_run'" in classify["args"]
    assert all(float(m["ms"]) >= 0 for m in calls.values())


def test_a_hook_no_plugin_implements_is_traced_too(capsys):
    manager = PluginManager(load_entry_points=False, env={"TACKROOM_TRACE_PLUGINS": "1"})
    manager.hook.tackroom_trial_started(trial="a trial")
    (call,) = traced_lines(capsys.readouterr().err)
    assert (call["hook"], call["args"], call["plugins"]) == ("tackroom_trial_started", "trial='a trial'", "no plugin")


def test_unset_or_empty_nothing_is_traced(capsys):
    for env in ({}, {"TACKROOM_TRACE_PLUGINS": ""}):
        manager = PluginManager(load_entry_points=False, env=env)
        manager.register(traced_plugin())
        manager.entries()
        manager.hook.tackroom_classify_error(error=ValueError(), phase="verify")
    assert capsys.readouterr().err == ""


def test_the_variable_is_read_from_the_environment_for_installed_plugins():
    code = "from tackroom._manager import get_plugin_manager; get_plugin_manager().entries()"
    traced = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={"TACKROOM_TRACE_PLUGINS": "1", "TACKROOM_LOAD_PLUGINS": "", "PATH": "/usr/bin:/bin"})
    assert traced.returncode == 0, traced.stderr
    hooks = {(m["hook"], m["plugins"]) for m in traced_lines(traced.stderr)}
    assert ("tackroom_harnesses", "tackroom:nop") in hooks and ("tackroom_verifiers", "tackroom:test-script") in hooks
