"""Object ids in OpenAI's shapes: a type prefix and random hex.

Ids are unguessable (24 random bytes) because a response id is the only thing a
client presents to read or continue a stored response within its tenant. The
bytes are the operating system's CSPRNG (`os.urandom`, what `secrets.token_hex`
reads, without its two calls' overhead: a stream makes several ids per request).
"""

from __future__ import annotations

import os
import re

RESPONSE_ID = re.compile(r"resp_[A-Za-z0-9_-]{1,128}")


def new_response_id() -> str:
    return "resp_" + os.urandom(24).hex()


def new_message_id() -> str:
    return "msg_" + os.urandom(24).hex()


def new_function_call_id() -> str:
    return "fc_" + os.urandom(24).hex()


def new_function_call_output_id() -> str:
    return "fco_" + os.urandom(24).hex()


def looks_like_response_id(value: object) -> bool:
    """Whether `value` could name a stored response (anything else is never found)."""
    return isinstance(value, str) and RESPONSE_ID.fullmatch(value) is not None
