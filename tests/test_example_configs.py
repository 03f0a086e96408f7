"""Every config under examples/ that a README tells a user to run loads, and every harness row in it is built with
its options: a misspelt option in an example (a harness that has no ``context_length``) fails here, not an hour into a
user's run. Nothing runs; the folders a config names from earlier runs (``init_from``, a dataset) need not exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from tackroom import ConfigError
from tackroom_app import PluginSelection, instantiate
from tackroom_matrix.config import load_matrix_config
from tackroom_train.collect.config import load_collect_config
from tackroom_train.config import load_train_config

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def configs(kind: str) -> list[Path]:
    return sorted((EXAMPLES / kind).glob("*.toml"))


def built(rows) -> list[str]:
    for i, row in enumerate(rows):
        instantiate("harness", PluginSelection(name=row.name, options=row.options), where=f"harnesses[{i}]")
    return [row.name for row in rows]


@pytest.mark.parametrize("path", configs("matrix"), ids=lambda p: p.name)
def test_a_matrix_example_loads_and_builds_its_harnesses(path):
    config = load_matrix_config(path)
    assert built([row for row in config.harnesses if not row.if_installed])


@pytest.mark.parametrize("path", configs("collect"), ids=lambda p: p.name)
def test_a_collect_example_loads_and_builds_its_harnesses(path):
    assert built(load_collect_config(path).harness_rows())


@pytest.mark.parametrize("path", configs("train"), ids=lambda p: p.name)
def test_a_train_example_loads_and_builds_its_harnesses(path):
    config = load_train_config(path)
    assert built(config.harnesses or [config.harness])


def test_a_misspelt_harness_option_fails_here(tmp_path):
    """The test can fail: the Gemini CLI has no ``context_length``, and a row that gives it one is refused."""
    bad = tmp_path / "bad.toml"
    bad.write_text((EXAMPLES / "matrix" / "lookup-bash.toml").read_text().replace(
        '"compact", tools = ["run_shell_command"]', '"compact", context_length = 4096, tools = ["run_shell_command"]'))
    config = load_matrix_config(bad)
    with pytest.raises(ConfigError, match="context_length: unknown field"):
        built(config.harnesses)
