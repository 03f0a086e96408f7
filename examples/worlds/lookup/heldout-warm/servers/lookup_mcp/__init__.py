"""MCP servers of the lookup worlds (examples/worlds/lookup): read-only access to the world's files."""
