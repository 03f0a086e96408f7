"""Where tackroom's own chat template files are: a leaf module, so naming the folder imports nothing else
(tackroom-engine's registration names it on every ``tackroom`` command; the tokenizers module imports httpx)."""

from pathlib import Path

TEMPLATES_DIR = Path(__file__).with_name("chat_templates")
"""tackroom's own chat templates (``smollm2_tools.jinja``: SmolLM2 with Hermes tool calls); the engine serves
with the same file."""
