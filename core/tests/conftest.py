import pytest

import tackroom


@pytest.fixture
def manager() -> tackroom.PluginManager:
    """A plugin manager with no entry points loaded: register test plugins on it directly."""
    return tackroom.PluginManager(load_entry_points=False)
