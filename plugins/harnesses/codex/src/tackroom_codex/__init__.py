"""The ``codex`` harness: OpenAI Codex CLI, headless in the sandbox, its model calls through the policy gateway."""
