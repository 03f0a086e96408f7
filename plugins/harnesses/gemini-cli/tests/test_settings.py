"""The settings the Gemini CLI runs with: the policy only, no Google-hosted tools, no rewriting of the conversation."""

from __future__ import annotations

from tackroom_gemini_cli.settings import COMPACT_TOOLS, FULL_TOOLS, build_settings


def test_settings_pin_the_auth_the_turn_limit_and_local_tools_only():
    doc = build_settings(tools=COMPACT_TOOLS, max_turns=7)
    assert doc["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert doc["model"]["maxSessionTurns"] == 7 and doc["model"]["skipNextSpeakerCheck"] is True
    assert doc["model"]["compressionThreshold"] == 1 and doc["model"]["disableLoopDetection"] is True
    assert doc["telemetry"]["enabled"] is False and doc["privacy"]["usageStatisticsEnabled"] is False
    assert doc["tools"]["core"] == list(COMPACT_TOOLS)
    # the gateway refuses Google-hosted tools (googleSearch, urlContext): no profile registers the CLI's wrappers
    assert not {"google_web_search", "web_fetch"} & set(FULL_TOOLS)
    assert "maxSessionTurns" not in build_settings(tools=FULL_TOOLS, max_turns=None)["model"]
