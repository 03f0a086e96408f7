"""What a local engine is: its settings (port, model folder, served name, chat template, LoRA, limits), the
names and folders every part of the package shares, and the error it raises."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from tackroom import InfraError, cache_root

# The tools-capable chat template belongs to the gateway's tokenizers (tackroom-gateway): the engine serves
# what the gateway tokenizes, from the same file.
from tackroom_gateway import TEMPLATES_DIR

MODEL_NAME = "SmolLM2-135M-Instruct"
SERVED_NAME = "smollm2"
DEFAULT_PORT = 8011
TOOLS_TEMPLATE = TEMPLATES_DIR / "smollm2_tools.jinja"


TRAINED_POLICY_MARK = "tackroom-policy.json"
"""The provenance file ``tackroom train`` writes into ``<run>/policy``."""


class EngineError(InfraError):
    """The local engine could not be set up, started or reached."""


class EngineSettings(BaseModel):
    """Where and how a local engine runs, and what it serves."""

    port: int = DEFAULT_PORT
    host: str = "127.0.0.1"
    model: str | None = None
    """A local HF folder (config.json + safetensors), e.g. a trained policy; None: the converted SmolLM2."""
    served_name: str | None = None
    """The model name clients send; default ``smollm2`` for SmolLM2, a trained policy's run name for
    ``<run>/policy`` (what ``tackroom train`` writes, links such as ``latest`` followed), else the folder's name.
    A served name that says which run it is lets a matrix refuse to resume results of another policy."""
    chat_template: str | None = None
    """A Jinja file; default: tackroom's tools template for SmolLM2, else the folder's ``chat_template.jinja``
    (when it has none, vLLM uses the tokenizer config's)."""
    max_model_len: int = 4096
    kv_cache_gib: int = 2
    lora_rank: int | None = Field(default=None, ge=1)
    """Serve LoRA adapters up to this rank (``--enable-lora --max-lora-rank``) and let a trainer add them to the
    running engine (``POST /v1/load_lora_adapter``, ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``); None: no LoRA."""
    max_loras: int = Field(default=2, ge=1)
    """Adapters in one batch at once (``--max-loras``), when :attr:`lora_rank` is set."""
    eager: bool = False
    """Start vLLM without its compile (``-O0``): from cold compile caches a third of the start, decoding at
    0.78–0.95x the tokens a second (``benchmarks/engine_modes.py``)."""
    start_timeout_sec: float = 900.0
    install_timeout_sec: float = 1800.0
    extra_args: list[str] = Field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def model_path(self) -> Path:
        """The folder served (not checked; :func:`check_model_folder` does)."""
        return Path(self.model).expanduser().resolve() if self.model else model_dir()

    def name(self) -> str:
        if self.served_name:
            return self.served_name
        if not self.model:
            return SERVED_NAME
        folder = Path(self.model).expanduser().resolve()
        if folder.name == "policy" and (folder / TRAINED_POLICY_MARK).is_file():
            return folder.parent.name
        return folder.name

    def template(self) -> Path | None:
        if self.chat_template:
            return Path(self.chat_template).expanduser().resolve()
        if not self.model:
            return TOOLS_TEMPLATE
        own = self.model_path() / "chat_template.jinja"
        return own if own.is_file() else None


def engine_dir() -> Path:
    return cache_root() / "engine"


def venv_dir() -> Path:
    return cache_root() / "engine-venv"


def model_dir() -> Path:
    return cache_root() / "models" / MODEL_NAME
