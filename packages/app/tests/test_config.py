"""Config errors a user can hit: unknown plugin, unknown field, missing file, bad TOML."""

import pytest

import tackroom
import tackroom_app
from tackroom_app import instantiate, read_toml, validate


def test_unknown_plugin_lists_installed_and_the_catalogue_install_line():
    with pytest.raises(tackroom_app.PluginNotFoundError) as err:
        instantiate("harness", tackroom_app.PluginSelection(name="hello"), manager=tackroom_app.PluginManager(env={"TACKROOM_BLOCK_PLUGINS": "tackroom-hello"}))
    message = str(err.value)
    assert "harness.name: no harness named 'hello' is installed" in message
    assert "nop" in message
    assert "pip install ./examples/plugins/tackroom-hello" in message


def test_unknown_plugin_not_in_catalogue_still_lists_installed():
    with pytest.raises(tackroom_app.PluginNotFoundError, match=r"installed harnesses: .*nop") as err:
        instantiate("harness", "nope-nope")
    assert "pip install" not in str(err.value)


def test_unknown_option_field_names_the_dotted_path():
    with pytest.raises(tackroom.ConfigError, match=r"harness\.bogus: unknown field"):
        instantiate("harness", tackroom_app.PluginSelection(name="nop", bogus=1))


def test_unknown_top_level_field_names_the_path_and_lists_valid_fields(tmp_path):
    f = tmp_path / "run.toml"
    f.write_text('taskz = ["x"]\n[runtime]\nattemps = 2\n')
    with pytest.raises(tackroom.ConfigError) as err:
        tackroom_app.load_run_config(f)
    message = str(err.value)
    assert "taskz: unknown field" in message and "runtime.attemps: unknown field" in message
    assert "valid fields: " in message and "tasks" in message
    # a field unknown inside a section lists that section's fields
    assert "valid fields of runtime: " in message and "attempts" in message.split("valid fields of runtime: ")[1]


def test_wrong_type_names_the_path(tmp_path):
    f = tmp_path / "run.toml"
    f.write_text("[runtime]\nconcurrency = 0\n")
    with pytest.raises(tackroom.ConfigError, match=r"runtime\.concurrency: Input should be greater than or equal to 1"):
        tackroom_app.load_run_config(f)


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(tackroom.ConfigError, match="config file not found"):
        read_toml(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[harness\nname=1")
    with pytest.raises(tackroom.ConfigError, match="invalid TOML"):
        read_toml(bad)


def test_validate_returns_the_model():
    cfg = validate(tackroom_app.RunConfig, {"harness": {"name": "nop"}})
    assert cfg.harness.name == "nop" and cfg.harness.options == {}


def test_plugin_options_may_sit_in_an_options_table_as_in_the_matrix(tmp_path):
    from tackroom import ConfigError
    from tackroom_app import PluginSelection, validate

    flat = validate(PluginSelection, {"name": "terminus", "max_turns": 4})
    table = validate(PluginSelection, {"name": "terminus", "options": {"max_turns": 4}})
    assert flat.options == table.options == {"max_turns": 4} and table.name == "terminus"
    with pytest.raises(ConfigError, match=r"harness\.options: max_turns given both"):
        validate(PluginSelection, {"name": "t", "max_turns": 4, "options": {"max_turns": 5}}, prefix="harness")
    with pytest.raises(ConfigError, match="must be a table"):
        validate(PluginSelection, {"name": "t", "options": 3})
