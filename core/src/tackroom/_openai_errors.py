"""Reading the error out of an OpenAI-compatible endpoint's answer (vLLM, LiteLLM, FastAPI, a proxy page)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `import tackroom` (every `tackroom` command) does not load httpx for a type
    import httpx


def error_message(response: httpx.Response) -> tuple[str, str]:
    """(message, code) from an OpenAI-style error body (``{"error": {...}}``, FastAPI's ``{"detail": ...}``), or the raw text."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500], ""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error)[:1000], str(error.get("code") or "")
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])[:1000], ""
    return str(body)[:500], ""
