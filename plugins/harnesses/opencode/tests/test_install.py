"""The host install: found when present, installed from npm when not, and clear errors when it cannot be."""

from __future__ import annotations

import asyncio
import filecmp
import stat

import pytest
import typer
from typer.testing import CliRunner

from tackroom import ConfigError
from tackroom.testing import task_for_tests
from tackroom_opencode.commands import opencode_app
from tackroom_opencode.harness import OpenCodeHarness
from tackroom_opencode.install import DEFAULT_VERSION, OpenCodeInstallError, ensure_installed, find_ripgrep


def test_the_install_is_found_with_a_static_ripgrep(opencode_install):
    assert opencode_install.version == DEFAULT_VERSION
    assert opencode_install.binary.name == "opencode" and opencode_install.binary.stat().st_size > 50_000_000
    assert opencode_install.ripgrep == find_ripgrep()
    again = asyncio.run(ensure_installed(cache_dir=opencode_install.root.parent))
    assert again.binary == opencode_install.binary and again.shipped == opencode_install.shipped


def test_what_sandboxes_get_is_a_read_only_copy_of_the_binary_and_ripgrep(opencode_install):
    shipped = opencode_install.shipped
    assert sorted(p.name for p in shipped.iterdir()) == ["opencode", "rg"]
    assert filecmp.cmp(shipped / "opencode", opencode_install.binary, shallow=False)
    assert filecmp.cmp(shipped / "rg", opencode_install.ripgrep, shallow=False)
    assert {stat.S_IMODE((shipped / n).stat().st_mode) for n in ("opencode", "rg")} == {0o555}
    assert shipped.parent == opencode_install.root.parent / "ship"


def test_without_npm_the_error_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm anywhere
    with pytest.raises(OpenCodeInstallError, match="npm is not on PATH") as info:
        asyncio.run(ensure_installed(cache_dir=tmp_path / "cache"))
    assert f"npm install --prefix {tmp_path / 'cache' / DEFAULT_VERSION} opencode-ai@{DEFAULT_VERSION}" in str(info.value)
    assert info.value.error_class == "infra"


def test_the_cli_prints_the_binary_it_ships(opencode_install):
    cli = typer.Typer()
    cli.add_typer(opencode_app, name="opencode")  # as the tackroom_commands hook adds it
    out = CliRunner().invoke(cli, ["opencode", "install", "--cache-dir", str(opencode_install.root.parent)])
    assert out.exit_code == 0, out.output
    assert f"opencode {DEFAULT_VERSION}: {opencode_install.binary}" in out.output
    assert f"what sandboxes get: {opencode_install.shipped}" in out.output


def test_running_without_a_policy_is_a_config_error():
    with pytest.raises(ConfigError, match=r"set \[policy\] base_url"):
        asyncio.run(OpenCodeHarness().run(task_for_tests("hi"), sandbox=None, policy=None))  # type: ignore[arg-type]
