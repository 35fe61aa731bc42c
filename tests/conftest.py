"""pytest configuration: hypothesis profiles (CW_MAX_EXAMPLES tunes the example count)."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", max_examples=int(os.environ.get("CW_MAX_EXAMPLES", "300")), deadline=None)
settings.register_profile("dev", max_examples=int(os.environ.get("CW_MAX_EXAMPLES", "100")), deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
