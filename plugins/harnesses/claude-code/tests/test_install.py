"""The pinned Claude Code from npm: the platform's native binary, in the cache, that reports its version."""

from __future__ import annotations

import asyncio
import subprocess

from tackroom_claude_code.install import DEFAULT_VERSION, ensure_installed, platform_package, reported_version


def test_the_install_holds_the_native_binary_of_the_pinned_version(claude_install):
    assert claude_install.version == DEFAULT_VERSION
    assert claude_install.binary.parent.name == platform_package().rsplit("/", 1)[1]
    out = subprocess.run([str(claude_install.binary), "--version"], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    assert reported_version(out.stdout) == DEFAULT_VERSION
    # a second call finds it without npm
    assert asyncio.run(ensure_installed()).binary == claude_install.binary


def test_the_version_is_read_from_claudes_own_words():
    assert reported_version("2.1.332 (Claude Code)\n") == "2.1.332"
    assert reported_version("Claude Code") is None
