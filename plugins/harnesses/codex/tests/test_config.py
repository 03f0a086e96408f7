"""config.toml and the model catalog, checked by the real Codex binary (`--strict-config` refuses unknown keys)."""

from __future__ import annotations

import json
import subprocess
import tomllib

import pytest

from tackroom_codex.config import (
    API_KEY_ENV,
    COMPACT_PROMPT,
    CodexSettings,
    McpServer,
    build_config,
    catalog_json,
    to_toml,
    uses_catalog,
)


def settings(**kw) -> CodexSettings:
    base = {"base_url": "http://127.0.0.1:9/v1", "model": "smollm2", "context_length": 8192, "profile": "compact",
            "prompt": COMPACT_PROMPT, "catalog_path": "/opt/codex/home/catalog.json"}
    return CodexSettings(**{**base, **kw})


def test_the_provider_speaks_responses_to_the_relay_with_the_key_from_the_environment():
    doc = tomllib.loads(to_toml(build_config(settings())))
    provider = doc["model_providers"]["tackroom"]
    assert doc["model_provider"] == "tackroom" and doc["model"] == "smollm2"
    assert provider["wire_api"] == "responses" and provider["base_url"] == "http://127.0.0.1:9/v1"
    assert provider["env_key"] == API_KEY_ENV and "KEY" in API_KEY_ENV  # Codex keeps *KEY* vars from commands
    assert doc["sandbox_mode"] == "danger-full-access" and doc["approval_policy"] == "never"
    assert doc["web_search"] == "disabled" and doc["check_for_update_on_startup"] is False
    assert doc["analytics"] == {"enabled": False} and doc["history"] == {"persistence": "none"}
    assert doc["agents"] == {"enabled": False} and doc["mcp_servers"] == {}
    assert doc["model_auto_compact_token_limit"] > 1000 * doc["model_context_window"]


def test_the_catalog_offers_no_freeform_apply_patch():
    (entry,) = json.loads(catalog_json(settings()))["models"]
    assert entry["apply_patch_tool_type"] is None and entry["base_instructions"] == COMPACT_PROMPT
    assert entry["context_window"] == 8192 and entry["input_modalities"] == ["text"]


def test_the_full_profile_keeps_codexs_prompt_and_needs_no_catalog():
    s = settings(profile="full", prompt=None)
    assert not uses_catalog(s) and "model_catalog_json" not in build_config(s)
    with pytest.raises(ValueError, match="catalog carries the system prompt"):
        catalog_json(s)


def test_mcp_servers_are_codex_tables():
    remote = McpServer(url="http://h/mcp", headers={"X": "1"}).codex()
    local = McpServer(command=["python", "-m", "srv"], environment={"A": "b"}).codex()
    assert remote == {"url": "http://h/mcp", "http_headers": {"X": "1"}}
    assert local == {"command": "python", "args": ["-m", "srv"], "env": {"A": "b"}}
    with pytest.raises(ValueError, match="exactly one of"):
        McpServer().codex()


def test_toml_strings_survive_quotes_newlines_and_unicode():
    doc = {"a": 'say "hi"\n\tnow – ok', "t": {"x y": [1, True, "z"]}}
    assert tomllib.loads(to_toml(doc)) == doc


@pytest.mark.parametrize("profile", ["compact", "full"])
def test_codex_accepts_the_config_strictly(tmp_path, codex_install, profile):
    home = tmp_path / "home"
    home.mkdir()
    s = settings(profile=profile, prompt=COMPACT_PROMPT if profile == "compact" else None,
                 catalog_path=str(home / "catalog.json"), retries=0)
    (home / "config.toml").write_text(to_toml(build_config(s)))
    if uses_catalog(s):
        (home / "catalog.json").write_text(catalog_json(s))
    # The real binary loads it with --strict-config (unknown keys are fatal) and starts a thread; the model call
    # then fails at once (nothing listens on port 9, no retries), which is not what this test is about.
    out = subprocess.run([str(codex_install.binary), "exec", "--json", "--strict-config", "--skip-git-repo-check",
                          "hi"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CODEX_HOME": str(home),
                              API_KEY_ENV: "k"})
    assert "Error loading config" not in out.stderr and "unknown configuration field" not in out.stderr, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert events[0]["type"] == "thread.started", out.stdout
    # no warning about the config (a deprecated key, missing model metadata) either
    assert not [e for e in events if e.get("item", {}).get("type") == "error"] or profile == "full", events
