import pytest

import tackroom
import tackroom.app


@pytest.fixture
def manager() -> tackroom.app.PluginManager:
    """A plugin manager with no entry points loaded: register test plugins on it directly."""
    return tackroom.app.PluginManager(load_entry_points=False)
