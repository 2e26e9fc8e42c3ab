from __future__ import annotations

from tests.helpers.fake_openai import fake_openai, judge

__all__ = ["fake_openai", "judge"]
