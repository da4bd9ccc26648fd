"""Usage when the runtime sends none (a stream cut, a client gone, a runtime that does
not count): the one place that estimates it. It counts tokens, not events: a delta's
tokens are its logprobs when it carries them (one per token, exact), else its
characters at the prompt estimate's four a token; the prompt is the prompt estimate."""

from __future__ import annotations

from adapters.base import GenerationRequest, TextDelta, ToolCallDelta, Usage
from gateway.openai.requests import estimate_prompt_tokens

CONTENT_EVENTS = (TextDelta, ToolCallDelta)
CHARS_PER_TOKEN = 4


class UsageCount:
    """The completion tokens seen so far, for the usage to charge and report."""

    __slots__ = ("chars", "exact", "requests")

    def __init__(self, requests: list[GenerationRequest]) -> None:
        self.requests = requests
        self.exact = 0  # tokens known one by one (logprobs)
        self.chars = 0  # characters of the deltas that carried no logprobs

    def saw(self, event: TextDelta | ToolCallDelta) -> None:
        if isinstance(event, TextDelta):
            if event.logprobs:
                self.exact += len(event.logprobs)
            else:
                self.chars += len(event.text)
        else:
            self.chars += len(event.name or "") + len(event.arguments)

    def usage(self) -> Usage:
        prompt = sum(estimate_prompt_tokens(r) for r in self.requests)
        return Usage(prompt, self.exact - (-self.chars // CHARS_PER_TOKEN))
