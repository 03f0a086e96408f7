"""Core's built-in plugins. Each module is registered through the ``tackroom`` entry-point group
in core's pyproject, exactly as a third-party plugin would be; the core imports none of them."""
