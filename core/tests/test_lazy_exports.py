"""tackroom.LazyExports: a package's public names, listed once, loaded from their module on first access."""

import subprocess
import sys

import pytest

import tackroom


def write_package(root, exports: str) -> None:
    pkg = root / "lazypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import tackroom\nHERE = 1\n"
                                     f"_EXPORTS = tackroom.LazyExports(__name__, {exports}, extra=['HERE'])\n"
                                     "__getattr__, __dir__, __all__ = _EXPORTS.getattr, _EXPORTS.dir, _EXPORTS.names\n")
    (pkg / "heavy.py").write_text("import sys\nLOADS = sys.modules.setdefault('lazypkg_loads', [])\n"
                                  "LOADS.append(1)\nclass Thing:\n    pass\ndef make():\n    return Thing()\n")


def run(root, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)


def test_names_load_their_module_on_first_access_only(tmp_path):
    write_package(tmp_path, '{"lazypkg.heavy": ["Thing", "make"]}')
    out = run(tmp_path, "import sys, lazypkg\n"
                        "assert 'lazypkg.heavy' not in sys.modules\n"
                        "assert lazypkg.__all__ == ['HERE', 'Thing', 'make']\n"
                        "assert {'Thing', 'make', 'HERE'} <= set(dir(lazypkg))\n"
                        "assert dict(lazypkg._EXPORTS) == {'Thing': 'lazypkg.heavy', 'make': 'lazypkg.heavy'}\n"
                        "assert isinstance(lazypkg.make(), lazypkg.Thing)\n"
                        "assert 'Thing' in vars(lazypkg) and sys.modules['lazypkg_loads'] == [1]\n"
                        "from lazypkg import *\n"
                        "print('ok')\n")
    assert out.returncode == 0 and out.stdout == "ok\n", out.stderr[-2000:]


def test_an_unknown_name_is_an_attribute_error_naming_the_package(tmp_path):
    write_package(tmp_path, '{"lazypkg.heavy": ["Thing"]}')
    out = run(tmp_path, "import lazypkg\nlazypkg.Nope\n")
    assert "AttributeError: module 'lazypkg' has no attribute 'Nope'" in out.stderr


def test_a_name_listed_under_two_modules_is_refused():
    with pytest.raises(ValueError, match="'Thing' is listed under both pkg.a and pkg.b"):
        tackroom.LazyExports("pkg", {"pkg.a": ["Thing"], "pkg.b": ["Thing"]})
