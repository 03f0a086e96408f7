"""The ``gemini-cli`` harness: Google's Gemini CLI, headless inside the sandbox, through the gateway's Gemini dialect."""
