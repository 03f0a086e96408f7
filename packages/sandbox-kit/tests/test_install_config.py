"""install_env: the grader's pip and uv read only what the sandbox passes in as the image's configuration. The
behaviour with the real tools is tested in tests/security/test_grader_installs.py; here, against the real pip of
this machine: the variables made from a pip.conf make pip report the same settings as the file itself."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tackroom_sandbox_kit import install_env, pip_env

IMAGE_PIP = "[global]\nindex-url = http://mirror.example/simple\nfind-links =\n    /opt/a\n    /opt/b\n" \
            "[install]\nno-index = true\n"


def test_discovery_is_off_whatever_the_image():
    env = install_env({}, pip_configs=[], uv_config=None)
    assert env == {"PIP_CONFIG_FILE": "/dev/null", "UV_NO_CONFIG": "1"}


def test_the_images_pip_files_become_variables_global_first_later_files_winning():
    env = pip_env(["[global]\nindex-url = http://low\ntimeout = 5\n", IMAGE_PIP])
    assert env == {"PIP_INDEX_URL": "http://mirror.example/simple", "PIP_TIMEOUT": "5",
                   "PIP_FIND_LINKS": "/opt/a /opt/b", "PIP_NO_INDEX": "true"}
    assert pip_env(["not an ini file ["]) == {}


def test_the_images_uv_file_replaces_discovery_and_its_env_wins():
    env = install_env({}, pip_configs=[], uv_config="/etc/uv/uv.toml")
    assert env == {"PIP_CONFIG_FILE": "/dev/null", "UV_CONFIG_FILE": "/etc/uv/uv.toml"}
    # what the image's ENV sets is the image's choice: not overridden
    env = install_env({"PIP_INDEX_URL": "http://env", "UV_NO_CONFIG": "0"}, pip_configs=[IMAGE_PIP], uv_config=None)
    assert "PIP_INDEX_URL" not in env and "UV_NO_CONFIG" not in env and env["PIP_NO_INDEX"] == "true"


def test_real_pip_sees_through_the_variables_what_the_image_file_said(tmp_path):
    pip = shutil.which("pip3") or shutil.which("pip")
    if pip is None:
        pytest.skip("no pip on this machine")
    planted = tmp_path / "pip.conf"
    planted.write_text("[global]\nindex-url = http://agent.invalid/simple\n")
    base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PIP_CONFIG_FILE": str(planted)}
    seen = subprocess.run([pip, "config", "list"], capture_output=True, text=True, env=base, timeout=60).stdout
    assert "agent.invalid" in seen  # the planted file is read without the grader's variables
    env = {**base, **install_env({}, pip_configs=[IMAGE_PIP], uv_config=None)}
    seen = subprocess.run([pip, "config", "list"], capture_output=True, text=True, env=env, timeout=60).stdout
    assert "agent.invalid" not in seen, seen
    debug = subprocess.run([pip, "config", "debug"], capture_output=True, text=True, env=env, timeout=60).stdout
    assert "PIP_INDEX_URL='http://mirror.example/simple'" in debug and "PIP_FIND_LINKS='/opt/a /opt/b'" in debug, debug
