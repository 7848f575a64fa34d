"""Bearer tokens and the Origin allow-list, as pure checks and on a real server."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace

import pytest
from websockets.exceptions import InvalidStatus

from conftest import TEST_CONFIG, running, timeout
from voicews.access import AccessPolicy, check, load_tokens, own_origins
from voicews.asgi import headers_of
from voicews.client import RealtimeClient

SECRET = "s3cret-token-value"
POLICY = AccessPolicy(
    tokens=frozenset({SECRET}),
    allowed_origins=frozenset({"https://app.test"}),
    own_origins=own_origins("tts.local", 8765),
)


@pytest.mark.parametrize(
    ("headers", "query", "status"),
    [
        ({}, b"", 401),
        ({"authorization": f"Bearer {SECRET}"}, b"", None),
        ({"authorization": f"bearer {SECRET}"}, b"", None),
        ({"authorization": "Bearer wrong"}, b"", 401),
        ({"authorization": f"Basic {SECRET}"}, b"", 401),
        ({}, f"token={SECRET}".encode(), None),
        ({}, b"token=wrong", 401),
        ({"origin": "https://evil.test", "authorization": f"Bearer {SECRET}"}, b"", 403),
        ({"origin": "https://app.test", "authorization": f"Bearer {SECRET}"}, b"", None),
        (  # the bundled page, served by this server itself
            {"origin": "http://tts.local:8765", "authorization": f"Bearer {SECRET}"},
            b"",
            None,
        ),
        (  # DNS rebinding: evil.example resolves to us, and the Host header says so
            {
                "origin": "http://evil.example:8765",
                "host": "evil.example:8765",
                "authorization": f"Bearer {SECRET}",
            },
            b"",
            403,
        ),
        (
            {
                "origin": "gopher://evil.example:8765",
                "host": "evil.example:8765",
                "authorization": f"Bearer {SECRET}",
            },
            b"",
            403,
        ),
    ],
)
def test_check(headers: dict[str, str], query: bytes, status: int | None) -> None:
    refusal = check(POLICY, headers, query)
    assert (refusal.status if refusal else None) == status
    if refusal:
        assert SECRET not in refusal.message


@pytest.mark.parametrize(
    ("host", "port", "origins"),
    [
        (
            "127.0.0.1",
            8765,
            {"http://127.0.0.1:8765", "http://localhost:8765", "http://[::1]:8765"},
        ),
        ("0.0.0.0", 80, {"http://127.0.0.1", "http://localhost", "http://[::1]"}),
        ("::1", 9000, {"http://[::1]:9000", "http://localhost:9000", "http://127.0.0.1:9000"}),
        ("10.1.2.3", 8765, {"http://10.1.2.3:8765"}),
        ("tts.internal", 8765, {"http://tts.internal:8765"}),
    ],
)
def test_own_origins_come_from_the_bind_address(host: str, port: int, origins: set[str]) -> None:
    assert own_origins(host, port) == origins


def test_open_policy_admits_everyone() -> None:
    assert check(AccessPolicy(), {"origin": "https://any.test"}, b"") is None
    assert check(AccessPolicy(), {"origin": "null"}, b"") is None  # a sandboxed page's


MALFORMED_ORIGINS = {
    "two": "https://app.test, https://evil.test",  # two headers, as headers_of joins them
    "empty": "",
    "non-ascii": "https://äpp.test",
    "path": "https://app.test/",
    "user": "https://user@app.test",
    "space": "https://app.test ",
    "no-scheme": "app.test",
}


@pytest.mark.parametrize("origin", MALFORMED_ORIGINS.values(), ids=MALFORMED_ORIGINS.keys())
@pytest.mark.parametrize("policy", [AccessPolicy(), POLICY], ids=["open", "allow-list"])
def test_a_malformed_origin_is_refused_with_or_without_an_allow_list(
    origin: str, policy: AccessPolicy
) -> None:
    refusal = check(policy, {"origin": origin, "authorization": f"Bearer {SECRET}"}, b"")
    assert refusal is not None and (refusal.status, refusal.code) == (403, "origin_not_allowed")


def test_null_is_refused_by_an_allow_list() -> None:
    headers = {"origin": "null", "authorization": f"Bearer {SECRET}"}
    assert (refusal := check(POLICY, headers, b"")) is not None and refusal.status == 403


def test_repeated_headers_are_joined_not_chosen() -> None:
    scope = {"headers": [(b"Origin", b"https://a.test"), (b"X", b"1"), (b"origin", b"null")]}
    assert headers_of(scope) == {"origin": "https://a.test, null", "x": "1"}


def test_tokens_from_env_and_file(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("VOICEWS_TOKENS", "a, b,,")
    path = tmp_path / "tokens"
    path.write_text("# comment\nc\n\nd\n")
    assert load_tokens(str(path)) == frozenset({"a", "b", "c", "d"})


async def test_server_enforces_tokens_and_origins_and_never_logs_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with running(replace(TEST_CONFIG, access=POLICY)) as srv:
        for kwargs, status in [
            ({}, 401),
            ({"additional_headers": {"Authorization": "Bearer nope"}}, 401),
            ({"additional_headers": {"Authorization": f"Bearer {SECRET}"},
              "origin": "https://evil.test"}, 403),
        ]:  # fmt: skip
            with pytest.raises(InvalidStatus) as refused:
                await RealtimeClient.connect(srv.url, **kwargs)
            assert refused.value.response.status_code == status
        async with await RealtimeClient.connect(
            srv.url, additional_headers={"Authorization": f"Bearer {SECRET}"}
        ) as c:
            assert (await c.speak("Let me in.", timeout=timeout(20))).done is not None
        async with await RealtimeClient.connect(
            f"{srv.url}?token={SECRET}", origin="https://app.test"
        ) as c:
            assert c.created.session_id
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        writer.write(
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
            b"Connection: close\r\n\r\n{}"
        )
        response = await asyncio.wait_for(reader.read(), timeout(5))
        writer.close()
        assert response.startswith(b"HTTP/1.1 401") and b"www-authenticate: Bearer" in response
        assert json.loads(response.partition(b"\r\n\r\n")[2])["error"]["code"] == "unauthorized"
    server_lines = [r.getMessage() for r in caplog.records if not r.name.startswith("websockets.")]
    assert any("event=refused" in line for line in server_lines)
    assert any("[redacted]" in line for line in server_lines)  # the handshake was logged...
    assert not any(SECRET in line for line in server_lines)  # ...without the token


ORIGIN_HEADERS = {
    "two": [b"Origin: https://app.test", b"Origin: https://evil.test"],
    "empty": [b"Origin: "],
    "null": [b"Origin: null"],
    "non-ascii": ["Origin: https://äpp.test".encode()],
    "path": [b"Origin: https://app.test/path"],
}


@pytest.mark.parametrize("lines", ORIGIN_HEADERS.values(), ids=ORIGIN_HEADERS.keys())
async def test_every_malformed_or_refused_origin_gets_403_on_both_endpoints(
    lines: list[bytes],
) -> None:
    """One answer, on the WebSocket handshake and on the speech endpoint alike: 403 and
    ``origin_not_allowed`` (before, two Origin headers got a 400 from the WebSocket layer)."""
    policy = replace(POLICY, tokens=frozenset())
    async with running(replace(TEST_CONFIG, access=policy)) as srv:
        handshake = (
            b"GET /v1/realtime HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"Sec-WebSocket-Version: 13\r\n"
        )
        body = b'{"input": "hi"}'
        speech = (
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n".encode()
        )
        for head, tail in [(handshake, b""), (speech, body)]:
            reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
            writer.write(head + b"".join(line + b"\r\n" for line in lines) + b"\r\n" + tail)
            answer = await asyncio.wait_for(reader.read(), timeout(5))
            writer.close()
            assert answer.startswith(b"HTTP/1.1 403"), answer[:200]
            if tail:
                error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
                assert error["code"] == "origin_not_allowed"
