"""Every install line the catalogue prints works from this repository: first-party paths exist and hold
the distribution they name (no index serves ``tackroom-*`` yet)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tackroom._catalogue import load_catalogue

ROOT = Path(__file__).resolve().parents[1]


def test_first_party_entries_point_at_their_folder_in_this_repository():
    for entry in load_catalogue():
        if entry.party != "first" or entry.distribution == "tackroom":
            continue
        assert entry.path, f"{entry.name}: a first-party entry needs `path` (its folder in the repository)"
        project = tomllib.loads((ROOT / entry.path / "pyproject.toml").read_text())["project"]
        assert project["name"] == entry.distribution, entry.name
        assert entry.install_hint.startswith(f"pip install ./{entry.path} ")


def test_third_party_example_keeps_its_own_install_line():
    hello = next(e for e in load_catalogue() if e.name == "hello")
    assert hello.install_hint == "pip install ./examples/plugins/tackroom-hello"
    assert (ROOT / "examples/plugins/tackroom-hello/pyproject.toml").is_file()


def test_every_command_entry_names_the_distribution_that_adds_that_command():
    from tackroom._catalogue import catalogue_commands
    from tackroom._cli.main import app, command_names, load_plugin_commands

    load_plugin_commands()  # the workspace installs every distribution
    commands = catalogue_commands()
    assert {c.name for c in commands} == {"matrix", "gateway", "model", "train"}
    for command in commands:
        project = tomllib.loads((ROOT / command.path / "pyproject.toml").read_text())["project"]
        assert project["name"] == command.distribution, command.name
        assert "tackroom" in project.get("entry-points", {}), command.name
    assert {c.name for c in commands} <= command_names(), f"added by their distributions: {app.registered_groups}"
