"""The one error the structured-output package raises for a request it cannot honour."""

from __future__ import annotations


class SchemaError(ValueError):
    """A bad or unsupported JSON schema / response_format / tool definition.

    `param` names the request field at fault in OpenAI's style
    (`response_format`, `tools[2].function.parameters`); callers map this to a 400.
    """

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
