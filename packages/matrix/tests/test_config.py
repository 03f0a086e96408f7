"""Matrix config errors name the file and the dotted path, and say what to do."""

from __future__ import annotations

import pytest

import tackroom
import tackroom_app
from tackroom import ConfigError
from tackroom_app import Endpoint, PluginNotFoundError, load_run_config
from tackroom_matrix.config import load_matrix_config, resolve_plugins

from .conftest import EXAMPLES


def write(tmp_path, text: str):
    path = tmp_path / "m.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, expected", [
    ('tasks = ["t"]\n[[models]]\nlabel = "a"\n', "models[0]: give base_url"),
    ('[[models]]\nlabel = "a"\nbase_url = "http://x/v1"\n[[models]]\nlabel = "a"\nbase_url = "http://y/v1"\n',
     "models[1].label: model label 'a' is already used by models[0]"),
    ('[[harnesses]]\nname = "oracle"\n[[harnesses]]\nname = "oracle"\n',
     "harnesses[1].label: harness row label 'oracle' is already used by harnesses[0]; give each row"),
    ('passes = 2\nk = 3\n', "k: pass@3 needs at least 3 passes; passes is 2"),
    ('passes = 0\n', "passes: Input should be greater than or equal to 1"),
    ('[[harnesses]]\nname = "oracle"\nmax_turns = 3\n', "harnesses[0].max_turns: unknown field"),
    ('[runtime]\nconcurency = 3\n', "runtime.concurency: unknown field"),
    ('modles = []\n', "modles: unknown field"),
    ('[[models]]\nbase_url = "http://x/v1"\n[transfer]\nbaseline = "gpt"\n',
     "transfer.baseline: 'gpt' is not a model label; model labels: x"),
    ('[[models]]\nlabel = "a"\nbase_url = "http://x/v1"\napi_key = "k"\napi_key_env = "K"\n',
     "models[0]: give either api_key or api_key_env"),
])
def test_config_errors_name_the_dotted_path(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_matrix_config(path)
    assert expected in str(info.value)
    assert str(path) in str(info.value)


def test_defaults_and_relative_paths(tmp_path, monkeypatch):
    (tmp_path / "tasks").mkdir()
    monkeypatch.setenv("LITELLM_PROXY_URL", "http://proxy:4000/v1/")
    config = load_matrix_config(write(tmp_path, 'tasks = ["tasks"]\npasses = 4\n'
                                      '[[models]]\nlitellm = "anthropic/claude-3-5-haiku"\n'
                                      '[[models]]\nbase_url = "http://127.0.0.1:8011/v1/"\n'))
    assert config.tasks == [str(tmp_path / "tasks")] and config.k == 4
    assert config.runtime.run_id == "matrix-m" and config.title == "m"
    haiku, local = config.models
    assert haiku.label == "anthropic/claude-3-5-haiku" and haiku.endpoint == "http://proxy:4000/v1"
    assert local.label == "127.0.0.1:8011" and local.endpoint == "http://127.0.0.1:8011/v1"
    assert [h.row_label for h in config.harnesses] == ["oracle", "nop"]
    assert config.transfer_pairs() == [("anthropic/claude-3-5-haiku", "127.0.0.1:8011")]


def test_a_default_model_label_never_carries_the_urls_credentials(tmp_path):
    config = load_matrix_config(write(tmp_path, '[[models]]\nbase_url = "http://user:pw@host:9/v1"\n'))
    assert config.models[0].label == "host:9", "a label is written everywhere"


def test_plugin_names_and_options_are_checked_before_anything_runs(tmp_path, matrix_manager):
    unknown = load_matrix_config(write(tmp_path, '[[harnesses]]\nname = "orcale"\n'))
    with pytest.raises(PluginNotFoundError) as info:
        resolve_plugins(unknown, matrix_manager)
    assert "harnesses[0].name: no harness named 'orcale'" in str(info.value) and "oracle" in str(info.value)

    bad_option = load_matrix_config(write(tmp_path, '[[harnesses]]\nname = "oracle"\noptions = { solution = "/s" }\n'))
    with pytest.raises(ConfigError, match=r"harnesses\[0\]\.options\.solution: unknown field"):
        resolve_plugins(bad_option, matrix_manager)

    no_model = load_matrix_config(write(tmp_path, '[[harnesses]]\nname = "chat-once"\n'))
    with pytest.raises(ConfigError, match=r"harnesses\[0\]: harness 'chat-once' calls a model.*tackroom model up"):
        resolve_plugins(no_model, matrix_manager)

    bad_sandbox = load_matrix_config(write(tmp_path, '[sandbox]\nname = "lokal"\n'))
    with pytest.raises(PluginNotFoundError, match="sandbox.name: no sandbox named 'lokal'"):
        resolve_plugins(bad_sandbox, matrix_manager)


def test_if_installed_rows_are_skipped_with_a_notice(tmp_path, matrix_manager):
    config = load_matrix_config(write(tmp_path, '[[harnesses]]\nname = "oracle"\n'
                                      '[[harnesses]]\nname = "not-a-harness"\nif_installed = true\n'
                                      '[[models]]\nlabel = "m"\nbase_url = "http://127.0.0.1:1/v1"\n'))
    rows, sandbox, verifier, notices = resolve_plugins(config, matrix_manager)
    assert [r.label for r in rows] == ["oracle"] and sandbox.name == "local" and verifier.name == "test-script"
    assert notices[0] == "harness row 'not-a-harness' skipped: 'not-a-harness' is not installed"
    assert "[[models]] are not used" in notices[1]

    nothing = load_matrix_config(write(tmp_path, '[[harnesses]]\nname = "nope"\nif_installed = true\n'))
    with pytest.raises(ConfigError, match="none of the listed harnesses is installed; installed harnesses: .*oracle"):
        resolve_plugins(nothing, matrix_manager)


def test_the_demo_config_is_valid():
    config = load_matrix_config(EXAMPLES / "matrix" / "demo.toml")
    assert config.models[0].label == "smollm2" and config.models[0].endpoint == "http://127.0.0.1:8011/v1"
    rows, *_ = resolve_plugins(config, tackroom_app.PluginManager())
    assert {"oracle", "nop"} <= {r.label for r in rows}


def test_a_models_entry_is_the_same_endpoint_model_as_a_runs_policy(tmp_path):
    """One concept, one model: the table a run takes as ``[policy]`` is a matrix column as it is."""
    table = ('base_url = "http://127.0.0.1:8011/v1"\nmodel = "smollm2"\nlabel = "base"\ntoken_ids = true\n'
             'tokenizer = "smollm2"\nsampling = { temperature = 0.7 }\ngateway = false\n')
    [column] = load_matrix_config(write(tmp_path, f"[[models]]\n{table}")).models
    run_cfg = tmp_path / "run.toml"
    run_cfg.write_text(f"[policy]\n{table}")
    policy = load_run_config(run_cfg).policy
    assert type(column) is type(policy) is Endpoint
    assert column == policy and column.policy().model_dump() == policy.policy().model_dump()


def test_a_harness_written_for_an_older_plugin_contract_is_refused_before_any_cell_runs(tmp_path):
    class Greeter(tackroom.Harness):
        """Written for plugin contract 1."""

        name = "greeter"

        async def run(self, instruction, sandbox, policy):
            raise AssertionError("never called: refused when the matrix resolves its rows")

    class GreeterPlugin:
        tackroom_contract = 1

        @tackroom.hookimpl
        def tackroom_harnesses(self, register):
            register.add_harness(Greeter)

    manager = tackroom_app.PluginManager()
    manager.register(GreeterPlugin(), name="tackroom-greeter", distribution="tackroom-greeter")
    config = load_matrix_config(write(tmp_path, '[[harnesses]]\nname = "greeter"\n[[harnesses]]\nname = "oracle"\n'))
    with pytest.raises(tackroom_app.PluginIncompatibleError, match=r"harness 'greeter' from tackroom-greeter .*Harness\.run"):
        resolve_plugins(config, manager)
