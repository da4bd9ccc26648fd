"""The base of a policy's settings: a pydantic model, so that the gateway's config
embeds the policy's own type (validated once, written in one place) rather than a
copy of its fields."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Settings(BaseModel):
    # A typo in a config must fail loudly; a decision must not change its settings.
    model_config = ConfigDict(extra="forbid", frozen=True)
