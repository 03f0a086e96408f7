"""Makes the tests' helper module importable (tests run with --import-mode=importlib)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # mini_swe_agent_fixtures.py
