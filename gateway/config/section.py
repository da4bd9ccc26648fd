"""The base of every config section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictSection(BaseModel):
    # A typo in a platform team's config must fail loudly, not be ignored.
    model_config = ConfigDict(extra="forbid")
