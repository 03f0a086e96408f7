"""The ``claude-code`` harness: Anthropic's Claude Code CLI, headless in the sandbox, through the policy gateway."""
