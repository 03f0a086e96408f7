"""Scripts that run inside the sandbox with the world's Python (stdlib + ``mcp`` only; no tackroom imports)."""
