"""The harness is registered by reference: loading the plugins does not import httpx (every `tackroom` command
loads them), and what the registration says (name, summary, capabilities) is what the class says."""

from __future__ import annotations

import tackroom_app


def test_registration_matches_the_class() -> None:
    from tackroom_terminus.harness import TerminusHarness

    entry = tackroom_app.PluginManager(env={}).entry("harness", "terminus")
    assert entry.reference == "tackroom_terminus.harness:TerminusHarness"
    assert (entry.summary, entry.capabilities) == (TerminusHarness.summary(), TerminusHarness.capabilities)
    assert entry.load() is TerminusHarness


def test_the_package_still_exports_the_harness() -> None:
    import tackroom_terminus
    from tackroom_terminus import TerminusHarness, TerminusOptions

    assert TerminusHarness.name == "terminus" and TerminusHarness.Options is TerminusOptions
    assert set(tackroom_terminus.__all__) <= set(tackroom_terminus._EXPORTS)
