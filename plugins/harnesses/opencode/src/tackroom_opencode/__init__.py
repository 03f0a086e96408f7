"""tackroom-opencode: the OpenCode agent as a tackroom harness."""
