"""Every install line the catalogue prints works from this repository: first-party paths exist and hold
the distribution they name, and the line installs the first-party distributions it depends on with it
(no index serves ``tackroom-*`` yet, so pip could not find them)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tackroom._catalogue import catalogue_commands, load_catalogue

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {tomllib.loads(p.read_text())["project"]["name"]: p.parent.relative_to(ROOT).as_posix()
           for p in [*ROOT.glob("packages/*/pyproject.toml"), *ROOT.glob("plugins/*/*/pyproject.toml")]}
"""Every first-party distribution but core, by name: its folder."""


def first_party_needs(folder: str) -> set[str]:
    """The folders of the first-party distributions (core aside) that ``folder``'s distribution needs, transitively."""
    needs: set[str] = set()
    for requirement in tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]["dependencies"]:
        name = re.split(r"[ <>=!~;\[]", requirement, maxsplit=1)[0]
        if name in FOLDERS:
            needs |= {FOLDERS[name], *first_party_needs(FOLDERS[name])}
    return needs


def expected_line(folder: str, needs: list[str]) -> str:
    return f"pip install {' '.join(f'./{p}' for p in [*needs, folder])} (from a checkout of the tackroom repository)"


def test_first_party_entries_point_at_their_folder_and_install_what_they_need():
    for entry in [*load_catalogue(), *catalogue_commands()]:
        if getattr(entry, "party", "first") != "first" or entry.distribution == "tackroom":
            continue
        assert entry.path, f"{entry.name}: a first-party entry needs `path` (its folder in the repository)"
        project = tomllib.loads((ROOT / entry.path / "pyproject.toml").read_text())["project"]
        assert project["name"] == entry.distribution, entry.name
        assert set(entry.requires) == first_party_needs(entry.path), (
            f"{entry.name}: registry.toml's `requires` must list the folders of the first-party distributions "
            f"{entry.distribution} depends on")
        assert entry.install_hint == expected_line(entry.path, entry.requires), entry.name


def test_the_default_sandbox_installs_with_the_sandbox_kit():
    local = next(e for e in load_catalogue() if e.name == "local")
    assert local.install_hint.startswith("pip install ./packages/sandbox-kit ./plugins/sandboxes/local ")


def test_the_check_sees_a_dependency_an_entry_does_not_list():
    assert first_party_needs("plugins/verifiers/rubric-judge") == {"plugins/verifiers/file-diff"}
    assert first_party_needs("plugins/harnesses/opencode") == {"packages/sandbox-kit", "packages/agent-kit", "packages/gateway",
                                                              "packages/worlds"}
    assert first_party_needs("plugins/verifiers/file-diff") == set()


def test_third_party_example_keeps_its_own_install_line():
    hello = next(e for e in load_catalogue() if e.name == "hello")
    assert hello.install_hint == "pip install ./examples/plugins/tackroom-hello"
    assert (ROOT / "examples/plugins/tackroom-hello/pyproject.toml").is_file()


def test_every_command_entry_names_the_distribution_that_adds_that_command():
    from tackroom_app._cli.main import app, command_names, load_plugin_commands

    load_plugin_commands()  # the workspace installs every distribution
    commands = catalogue_commands()
    assert {c.name for c in commands} == {"matrix", "gateway", "model", "train", "view", "export", "import",
                                          "archipelago", "serve", "collect"}
    for command in commands:
        project = tomllib.loads((ROOT / command.path / "pyproject.toml").read_text())["project"]
        assert project["name"] == command.distribution, command.name
        assert "tackroom" in project.get("entry-points", {}), command.name
    assert {c.name for c in commands} <= command_names(), f"added by their distributions: {app.registered_groups}"


def test_each_plugin_is_listed_once_per_kind():
    raw = tomllib.loads((ROOT / "registry.toml").read_text())["plugin"]
    seen: dict[tuple[str, str], int] = {}
    for entry in raw:
        key = (entry["kind"], entry["name"])
        seen[key] = seen.get(key, 0) + 1
    assert not {k: n for k, n in seen.items() if n > 1}, "registry.toml lists a plugin more than once"
