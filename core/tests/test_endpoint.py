"""One endpoint model: ``[policy]`` of a run (and a training run) and each ``[[models]]`` of a matrix."""

import pytest

import tackroom
from tackroom._config import RunConfig
from tackroom._endpoint import LITELLM_PROXY_ENV, Endpoint
from tackroom_app import Endpoint as PublicEndpoint
from tackroom_app import load_run_config


def test_the_endpoint_is_the_run_configs_policy_section(tmp_path):
    assert PublicEndpoint is Endpoint and RunConfig.model_fields["policy"].annotation is Endpoint
    cfg = tmp_path / "run.toml"
    cfg.write_text('[policy]\nbase_url = "http://127.0.0.1:8011/v1/"\ntoken_ids = true\ntokenizer = "smollm2"\n'
                   'sampling = { temperature = 0.5 }\nlabel = "base"\n')
    policy = load_run_config(cfg).policy.policy()
    assert (policy.base_url, policy.model, policy.token_ids, policy.tokenizer, policy.sampling, policy.display_name) == (
        "http://127.0.0.1:8011/v1", "default", True, "smollm2", {"temperature": 0.5}, "base")
    assert load_run_config(cfg).policy.policy("smollm2").model == "smollm2", "the name the endpoint reported"


def test_no_endpoint_means_no_model_and_litellm_goes_through_the_proxy(monkeypatch):
    assert not Endpoint().configured
    monkeypatch.setenv(LITELLM_PROXY_ENV, "http://proxy:4000/v1/")
    e = Endpoint(litellm="anthropic/claude-3-5-haiku")
    assert e.configured and e.endpoint == "http://proxy:4000/v1"
    assert e.policy().model == "anthropic/claude-3-5-haiku"


@pytest.mark.parametrize(("table", "message"), [
    ('base_ur = "http://x/v1"', "policy.base_ur"),
    ('base_url = "http://x/v1"\napi_key = "k"\napi_key_env = "K"', "either api_key or api_key_env"),
    ('litellm = "a/b"\nmodel = "c"', "either model or litellm"),
])
def test_a_wrong_policy_field_is_a_config_error_naming_it(tmp_path, table, message):
    cfg = tmp_path / "run.toml"
    cfg.write_text(f"[policy]\n{table}\n")
    with pytest.raises(tackroom.ConfigError, match=message):
        load_run_config(cfg)


def test_a_key_from_an_unset_variable_names_the_setting(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(tackroom.ConfigError, match=r"policy.api_key_env: environment variable NO_SUCH_KEY_VAR"):
        Endpoint(base_url="http://x/v1", api_key_env="NO_SUCH_KEY_VAR").policy()
    with pytest.raises(tackroom.ConfigError, match=r"model 'm1': api_key_env"):
        Endpoint(base_url="http://x/v1", api_key_env="NO_SUCH_KEY_VAR", label="m1").policy()
