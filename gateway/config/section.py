"""The base of every config section, and what a section shows of itself: a field
marked `secret_field()` is never shown, and every other value passes the one
redaction rule (policies/redact.py) on its way to `/admin/config`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from policies.redact import MASK, redact_text, secret_name

_SECRET = "secret"


class StrictSection(BaseModel):
    # A typo in a platform team's config must fail loudly, not be ignored.
    model_config = ConfigDict(extra="forbid")


def secret_field(default: Any = None, **kwargs: Any) -> Any:
    """A config field whose value is a secret (shown as `***` wherever the config is)."""
    return Field(default, json_schema_extra={_SECRET: True}, **kwargs)


def redacted_dump(section: BaseModel) -> dict[str, Any]:
    """`section` as JSON data with every secret masked: fields marked secret, the
    values of free mappings (a backend's options, headers) under a secret-sounding
    name, and whatever the redaction rule finds in a string (a URL's userinfo, a
    `?password=`)."""
    return _walk(section, section.model_dump(mode="json"))


def _walk(value: Any, data: Any) -> Any:
    if isinstance(value, BaseModel):
        out = {}
        for name, field in type(value).model_fields.items():
            if name not in data:
                continue
            extra = field.json_schema_extra
            if isinstance(extra, dict) and extra.get(_SECRET) and data[name] is not None:
                out[name] = _masked(data[name])
            else:
                out[name] = _walk(getattr(value, name), data[name])
        return out
    if isinstance(value, dict) and isinstance(data, dict):
        return {k: MASK if secret_name(str(k)) else _walk(value.get(k), v) for k, v in data.items()}
    if isinstance(value, (list, tuple)) and isinstance(data, list):
        return [_walk(v, d) for v, d in zip(value, data, strict=False)]
    if isinstance(data, str):
        return redact_text(data)
    return data


def _masked(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: MASK for k in data}
    return MASK
