"""What plugins import from ``tackroom_gateway``'s top level resolves, and importing it (as plugin discovery does) is cheap."""

import subprocess
import sys

import tackroom_gateway


def test_every_public_name_resolves():
    assert sorted(tackroom_gateway.__all__) == sorted(tackroom_gateway._EXPORTS)
    for name in tackroom_gateway.__all__:
        assert getattr(tackroom_gateway, name) is not None, name


def test_plugin_discovery_does_not_load_the_server_or_the_tokenizers():
    code = ("import sys, tackroom_app\n"
            "m = tackroom_app.PluginManager(env={'TACKROOM_LOAD_PLUGINS': 'tackroom-gateway'})\n"
            "assert 'tackroom-gateway:gateway' in [i.plugin_name for i in m.hook.tackroom_commands.get_hookimpls()]\n"
            "bad = [m for m in sys.modules if m.startswith(('transformers', 'starlette', 'uvicorn', 'tokenizers'))]\n"
            "assert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
