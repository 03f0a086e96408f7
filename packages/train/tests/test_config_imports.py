"""Reading a train config imports the config models only: never the Tinker server module or its HTTP client."""

import subprocess
import sys


def test_the_config_model_does_not_import_the_tinker_server():
    code = ("import sys\n"
            "from tackroom_train.config import TrainConfig\n"
            "TrainConfig.model_fields['tinker']\n"
            "bad = [m for m in sys.modules if m == 'tackroom_train.tinker.server' or m.startswith('httpx')]\n"
            "assert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
