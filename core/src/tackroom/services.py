"""For plugins that call a service (an OpenAI-compatible endpoint, an LLM judge, an API with a key): the error an
answer carries, and secrets kept out of everything tackroom writes (logs, notes, results, trajectories)."""

from tackroom._openai_errors import error_message as openai_error_message
from tackroom._policy import redact, redact_url, register_secret, register_url_secrets

__all__ = ["openai_error_message", "redact", "redact_url", "register_secret", "register_url_secrets"]
