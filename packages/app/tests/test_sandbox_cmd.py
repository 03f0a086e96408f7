"""`tackroom sandbox cleanup`: the generic command in front of every provider's cleanup()."""

import json

import pytest
from typer.testing import CliRunner

from tackroom import ConfigError
from tackroom_app._cli.main import app
from tackroom_app._cli.sandbox_cmd import parse_options

runner = CliRunner()


def test_cleanup_of_an_unknown_sandbox_lists_the_installed_ones():
    result = runner.invoke(app, ["sandbox", "cleanup", "--sandbox", "no-such-sandbox"])
    assert result.exit_code == 2
    assert "no sandbox named 'no-such-sandbox'" in result.output


def test_cleanup_of_a_provider_without_leaks_reports_zero():
    # `local` (tackroom-local, the default sandbox, installed by the workspace): its cleanup() has nothing to
    # remove when no trial leaked. A machine where an earlier run was killed (OOM, kill -9) has leaks: the first
    # cleanup removes them, the second finds none (nothing a live run holds is ever counted).
    first = runner.invoke(app, ["sandbox", "cleanup", "--sandbox", "local", "--json"])
    assert first.exit_code == 0, first.output
    result = runner.invoke(app, ["sandbox", "cleanup", "--sandbox", "local", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"sandbox": "local", "removed": 0}


def test_options_are_key_value_with_json_values():
    assert parse_options(["a=1", "b=all", "c=true", 'd=["x"]']) == {"a": 1, "b": "all", "c": True, "d": ["x"]}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_options(["no-equals-sign"])


def test_a_misspelt_option_names_its_dotted_path():
    listed = json.loads(runner.invoke(app, ["plugins", "--json"]).output)
    name = next(r["name"] for r in listed if r["kind"] == "sandbox")
    result = runner.invoke(app, ["sandbox", "cleanup", "--sandbox", name, "--option", "no_such_option=1"])
    assert result.exit_code == 2
    assert "sandbox.no_such_option: unknown field" in result.output
