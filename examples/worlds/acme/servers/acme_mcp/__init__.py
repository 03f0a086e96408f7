"""Acme's MCP servers: one module per app, each an ``MCPServer`` built over the world's files.

Every module has ``build_server(root)`` and runs alone over stdio
(``python3 -m acme_mcp.filesystem``, root from ``$WORLD_ROOT``, default
``/workspace``); the tackroom world gateway mounts them all behind one endpoint.
"""
