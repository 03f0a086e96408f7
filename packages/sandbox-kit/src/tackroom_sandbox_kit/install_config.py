"""Where the grader's package managers look for configuration: only where the task's image put it.

Terminal-Bench-style ``test.sh`` files install their test tools when grading starts (``pip install pytest==…``,
``uv venv`` + ``uv pip install``, ``uvx pytest``, ``apt-get install``, ``npm install``). Each of those tools
discovers configuration on its own, and a configuration file can add a package source: a ``pip.conf`` the agent
left inside the virtualenv folder ``test.sh`` is about to create (``venv`` keeps files already there), a
``uv.toml`` or ``[tool.uv]`` in the working directory, ``/etc/pip.conf`` ... then a fake ``pytest`` that always
passes is what gets installed. The grader's environment therefore points every package manager's discovery at a
place the grader owns (:func:`install_env`): the sandbox passes in the configuration the image itself made (read
where the agent could not have changed it), and nothing else is read. docs/threat-model.md lists each tool's
discovery sources and what stops each.
"""

from __future__ import annotations

import configparser

PIP_CONFIG_FILES = ("/etc/xdg/pip/pip.conf", "/etc/pip.conf")
"""pip's global configuration files, lowest priority first (``site`` — ``sys.prefix/pip.conf``, a virtualenv's
folder — and ``user`` — under HOME — are never the image's to the grader: see :func:`install_env`)."""
UV_CONFIG_FILES = ("/etc/xdg/uv/uv.toml", "/etc/uv/uv.toml")
"""uv's system configuration files, lowest priority first (uv reads the first it finds of the two, later first)."""

INSTALL_CLEAN_ENV = {
    # pip reads no configuration file at all when PIP_CONFIG_FILE is os.devnull: not global, not the user's,
    # not the site file inside a virtualenv (sys.prefix/pip.conf), which is where an agent-made venv folder hides
    # one. The image's global files come back as PIP_* variables (pip_env).
    "PIP_CONFIG_FILE": "/dev/null",
    # uv reads no uv.toml / [tool.uv] from the working directory or its parents, the user's or the system's; the
    # image's system file comes back through UV_CONFIG_FILE (install_env), which also turns discovery off.
    "UV_NO_CONFIG": "1",
}
"""Set for every grader command, whatever the image: configuration discovery off for pip and uv."""


def pip_env(texts: list[str]) -> dict[str, str]:
    """The image's pip configuration files (``texts``, lowest priority first) as the ``PIP_*`` variables that say
    the same: ``[global]`` first, then the per-command sections (pip's variables apply to every command, so a key
    set for one command applies to all; an image that sets different values per command is rare). A value over
    several lines (``find-links``, ``extra-index-url``) becomes one line, space-separated, as pip reads it there."""
    out: dict[str, str] = {}
    for text in texts:
        parser = configparser.RawConfigParser(strict=False, interpolation=None)
        try:
            parser.read_string(text)
        except configparser.Error:
            continue  # pip refuses a file it cannot parse too; the image's grading would have failed the same way
        sections = sorted(parser.sections(), key=lambda s: s != "global")
        for section in sections:
            for key, value in parser.items(section):
                name = "PIP_" + key.upper().replace("-", "_")
                out[name] = " ".join(value.split())
    return out


def install_env(image_env: dict[str, str], *, pip_configs: list[str], uv_config: str | None) -> dict[str, str]:
    """The variables to add to the grader's environment.

    ``image_env``: the environment the grader already has (the image's ``ENV``; what it sets wins over the image's
    files, as it does for pip and uv themselves). ``pip_configs``: the text of the image's own global pip files,
    lowest priority first. ``uv_config``: the path of the image's own uv system file, if any: the sandbox
    guarantees that file is the image's while the grader runs (restored before grading, read-only to kept
    services)."""
    env = dict(INSTALL_CLEAN_ENV)
    env.update({k: v for k, v in pip_env(pip_configs).items() if k not in image_env})
    if uv_config is not None:
        env.pop("UV_NO_CONFIG")
        env["UV_CONFIG_FILE"] = uv_config
    # A setting the image's ENV gives (UV_CONFIG_FILE, PIP_CONFIG_FILE=<its own file>) is the image's choice.
    return {k: v for k, v in env.items() if k not in image_env}
