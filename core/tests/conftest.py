import pytest

from tackroom._manager import PluginManager


@pytest.fixture
def manager() -> PluginManager:
    """A plugin manager with no entry points loaded: register test plugins on it directly."""
    return PluginManager(load_entry_points=False)
