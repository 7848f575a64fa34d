"""A conversation's history, the same on both sides: bounded, user first, replies as heard."""

from __future__ import annotations

from voicews.core.conversation import AgentConfig, Conversation, Message, truncate_history


def conversation(turns: int, size: int = 10) -> list[Message]:
    messages = [{"role": "system", "content": "be brief"}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"u{i}".ljust(size, ".")})
        messages.append({"role": "assistant", "content": f"a{i}".ljust(size, ".")})
    return messages


def test_truncate_history_keeps_system_and_newest_messages() -> None:
    messages = [*conversation(5), {"role": "user", "content": "now"}]
    kept = truncate_history(messages, max_messages=4)
    assert kept[0] == messages[0]
    assert kept[1:] == messages[-3:]  # 4 would start at an assistant message: dropped
    assert kept[1]["role"] == "user"


def test_truncate_history_bounds_characters() -> None:
    messages = [*conversation(5, size=100), {"role": "user", "content": "now"}]
    kept = truncate_history(messages, max_chars=250)
    assert sum(len(m["content"]) for m in kept[1:]) <= 250
    assert kept[-1]["content"] == "now"
    assert kept[1]["role"] == "user"


def test_truncate_history_never_drops_the_new_message() -> None:
    messages = [*conversation(2), {"role": "user", "content": "x" * 1000}]
    assert truncate_history(messages, max_messages=0, max_chars=10) == [
        messages[0],
        messages[-1],
    ]


def test_truncate_history_without_bounds_is_a_copy() -> None:
    messages = conversation(3)
    kept = truncate_history(messages)
    assert kept == messages and kept is not messages


def test_a_conversation_keeps_its_history_bounded_and_starting_with_the_user() -> None:
    talk = Conversation(AgentConfig(system_prompt="Be brief.", max_history_messages=3))
    talk.user("one")
    talk.assistant("reply one")
    talk.user("two")
    talk.assistant("  ")  # nothing was heard: no message
    talk.user("three")
    assert talk.history == [
        {"role": "user", "content": "two"},
        {"role": "user", "content": "three"},
    ]
    assert talk.prompt() == [{"role": "system", "content": "Be brief."}, *talk.history]


def test_without_a_system_prompt_the_template_has_its_own() -> None:
    talk = Conversation(AgentConfig(system_prompt=None, max_history_chars=10))
    talk.user("a" * 8)
    talk.user("c" * 20)  # over the bound alone: still kept, the older one goes
    assert talk.prompt() == [{"role": "user", "content": "c" * 20}]
