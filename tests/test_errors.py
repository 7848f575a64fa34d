"""The error mapping: each code answered one way per transport, and PROTOCOL.md in step with it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from voicews.errors import ANSWERS, SESSION_CODES, ErrorCode, VoicewsError, http_body

PROTOCOL = (Path(__file__).parent.parent / "protocol" / "PROTOCOL.md").read_text()


def section(number: int) -> str:
    return PROTOCOL.split(f"\n## {number}. ")[1].split("\n## ")[0]


def test_every_code_is_answered_somewhere() -> None:
    for code in ErrorCode:
        answer = ANSWERS[code]
        assert answer.event or answer.status is not None, code


def test_protocol_lists_the_session_codes_in_its_error_table() -> None:
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", section(12), re.MULTILINE)) - {"code"}
    assert listed == {code.value for code in SESSION_CODES}


def test_protocol_gives_each_refusal_its_status() -> None:
    rows = re.findall(r"^\| `(\d{3})` \| `([a-z_]+)` \|", section(2) + section(13), re.MULTILINE)
    documented = {code: int(status) for status, code in rows}
    assert documented == {c.value: a.status for c, a in ANSWERS.items() if a.status is not None}


def test_http_body_is_openai_shaped() -> None:
    error = VoicewsError(ErrorCode.INPUT_TOO_LONG, "input over 5 characters")
    assert error.status == 413
    assert json.loads(http_body(error)) == {
        "error": {"code": "input_too_long", "message": "input over 5 characters"}
    }


def test_a_session_only_code_has_no_status() -> None:
    with pytest.raises(ValueError):
        _ = VoicewsError(ErrorCode.TURN_CLOSED, "no").status
