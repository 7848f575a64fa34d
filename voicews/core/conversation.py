"""A voice conversation's settings and history, the same on either side.

The server's agent mode (one per session) and the client-side :class:`~voicews.agent.client.Agent`
keep the history the same way: bounded, starting with a user message, and holding each reply
as far as the user heard it. Pure: no model, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Message = dict[str, str]
"""A chat message as chat templates take it: ``{"role": ..., "content": ...}``."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    system_prompt: str | None = (
        "You are a helpful voice assistant. Answer briefly, in plain spoken sentences."
    )
    """None leaves it to the model's chat template (SmolLM2's has its own)."""
    max_tokens: int = 200
    temperature: float = 0.0
    top_p: float = 1.0
    max_history_messages: int = 20
    """Messages of conversation kept (the system prompt aside)."""
    max_history_chars: int = 6000


class Conversation:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.history: list[Message] = []

    def user(self, text: str) -> None:
        self._add("user", text)

    def assistant(self, heard: str) -> None:
        """A reply, as far as it was heard; one nobody heard leaves no message."""
        if heard.strip():
            self._add("assistant", heard)

    def prompt(self) -> list[Message]:
        """What the model sees: the system prompt and the history."""
        system = self.config.system_prompt
        return ([{"role": "system", "content": system}] if system else []) + self.history

    def _add(self, role: str, content: str) -> None:
        self.history.append({"role": role, "content": content})
        self.history = truncate_history(
            self.history, self.config.max_history_messages, self.config.max_history_chars
        )


def truncate_history(
    messages: Sequence[Message],
    max_messages: int | None = None,
    max_chars: int | None = None,
) -> list[Message]:
    """The leading system messages and the newest messages within both bounds.

    Bounds count the messages after the system ones. The kept part starts at a user message
    (templates expect user first) and always includes the last message, so the new user turn
    is never dropped even when it alone exceeds ``max_chars``.
    """
    head = 0
    while head < len(messages) and messages[head]["role"] == "system":
        head += 1
    system, rest = list(messages[:head]), list(messages[head:])
    kept: list[Message] = []
    chars = 0
    for message in reversed(rest):
        size = len(message["content"])
        full = max_messages is not None and len(kept) >= max_messages
        too_long = max_chars is not None and chars + size > max_chars
        if kept and (full or too_long):
            break
        kept.append(message)
        chars += size
    kept.reverse()
    while len(kept) > 1 and kept[0]["role"] != "user":
        kept.pop(0)
    return system + kept
