"""tackroom-mini-swe-agent: the mini-swe-agent harness (see ``harness.py``)."""
