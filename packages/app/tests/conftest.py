import pytest

import tackroom_app


@pytest.fixture
def manager() -> tackroom_app.PluginManager:
    """A plugin manager with no entry points loaded: register test plugins on it directly."""
    return tackroom_app.PluginManager(load_entry_points=False)
