"""The bundled web client in headless Chromium, against a real server and the real voice.

Drives the page through its ``window.voicews`` hook: a turn streamed by the page's LLM
simulation plays to the end from the AudioWorklet's jitter buffer, every sample once, paced by
the audio clock, and the player never runs dry with audio at hand; Stop (a barge-in) silences
it at once and shows what had been heard; a context at another rate resamples. Needs Playwright for
Python and a system Chromium (Debian: ``apt-get install chromium``); no browser is downloaded.
Without them the tests are skipped, or fail when ``$CI`` is set. Screenshots go to
``$VOICEWS_ARTIFACTS`` (default ``tests/artifacts/``).
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import shutil
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from conftest import timeout
from voicews.client import RealtimeClient
from voicews.server import VoicewsServer

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, Page

CHROMIUM = os.environ.get("VOICEWS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--autoplay-policy=no-user-gesture-required",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(os.environ.get("VOICEWS_ARTIFACTS") or Path(__file__).parent / "artifacts")

# Short sentences keep every synthesis job short, so the server stays ahead of playback.
REPLY = (
    "Sure, I can help with that. It will be sunny tomorrow. The high is twenty four "
    "degrees. A light breeze comes from the west."
)
LONG = " ".join(
    f"This is sentence number {i}, which keeps the speaker busy for a while." for i in range(20)
)


@dataclass
class Browser:
    page: Page
    problems: list[str] = field(default_factory=list)
    """Console errors, uncaught exceptions and failed requests."""
    foreign: list[str] = field(default_factory=list)
    """Requests for anything not served by voicews itself."""

    async def state(self) -> dict[str, Any]:
        state: dict[str, Any] = await self.page.evaluate("window.voicews.state")
        return state

    async def wait_for(self, condition: str, seconds: float) -> dict[str, Any]:
        """Wait until ``condition`` (a JS expression over the state ``s``) holds."""
        await self.page.wait_for_function(
            f"() => {{ const s = window.voicews.state; return {condition}; }}",
            timeout=timeout(seconds) * 1000,
            polling=20,
        )
        return await self.state()

    async def log(self) -> str:
        """The page's event log, for failure messages."""
        lines: list[str] = await self.page.eval_on_selector_all(
            "#log li", "items => items.map(item => item.textContent)"
        )
        return "\n".join(["page log:", *lines])

    async def screenshot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await self.page.screenshot(path=str(ARTIFACTS / name), full_page=True)

    @classmethod
    async def open(cls, context: BrowserContext, origin: str, path: str = "/") -> Browser:
        """A new tab on ``path``, watched for errors and foreign requests, once connected."""
        page = await context.new_page()
        b = cls(page)
        page.on(
            "console",
            lambda m: b.problems.append(f"console: {m.text}") if m.type == "error" else None,
        )
        page.on("pageerror", lambda e: b.problems.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: b.problems.append(f"request failed: {r.url}"))
        page.on(
            "request",
            lambda r: (
                None if r.url.startswith((origin + "/", "data:")) else b.foreign.append(r.url)
            ),
        )
        await page.goto(origin + path)
        await b.wait_for("s.connected", 10)
        return b


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (required under CI)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
async def browser(
    server: VoicewsServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Browser]:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        unavailable("Playwright for Python is not installed (pip install playwright)")
    executable = CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")
    if executable is None:
        unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    origin = server.http_url
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=executable,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1100, "height": 900},
        )
        try:
            b = await Browser.open(context, origin)
            # Warm up (the engine's first run, the audio pipeline) before anything is timed.
            await b.page.evaluate("(text) => window.voicews.speak(text, 0)", "Hello.")
            await b.wait_for("s.drained", 30)
            yield b
        finally:
            await context.close()


def words(text: str) -> list[str]:
    return text.split()


async def test_assets_are_served(server: VoicewsServer) -> None:
    expected = {
        "/": "text/html",
        "/index.html": "text/html",
        "/app.js": "text/javascript",
        "/wire.js": "text/javascript",
        "/player-worklet.js": "text/javascript",
        "/style.css": "text/css",
        "/vendor/msgpack.min.js": "text/javascript",
    }

    def fetch(path: str) -> tuple[int, str, str]:
        with urllib.request.urlopen(server.http_url + path, timeout=10) as response:
            return response.status, response.headers["content-type"], response.read().decode()

    for path, content_type in expected.items():
        status, got, body = await asyncio.to_thread(fetch, path)
        assert status == 200 and got.startswith(content_type), (path, status, got)
        if path in ("/", "/index.html", "/app.js", "/wire.js", "/player-worklet.js"):
            assert not re.search(r"""["'(]https?://""", body), f"{path} fetches from the internet"


async def test_streamed_turn_plays_through(browser: Browser) -> None:
    await browser.page.evaluate("([text, rate]) => window.voicews.speak(text, rate)", [REPLY, 50])
    s = await browser.wait_for("s.drained", 60)
    rate = s["sampleRate"]
    assert s["contextRate"] == rate == 22050  # the context runs at the server's rate
    assert s["turnDone"] == {"samples": s["samplesReceived"], "cancelled": False, "heardText": None}
    assert s["samplesReceived"] > 2 * rate
    # Drained: everything received was played, and played without a gap.
    assert s["samplesPlayed"] == s["samplesReceived"]
    # Gap-free: the player never ran dry after the first audio with audio at hand. On a
    # starved CPU the server itself can deliver a segment late (the page counts that as a late
    # underrun, and the log shows it); that is the server's pace, not the player's.
    assert s["underruns"] == s["lateUnderruns"], await browser.log()
    assert s["gaps"] == 0 and s["framesDropped"] == 0
    assert 0 < s["firstAudioMs"] <= s["firstPlayMs"] < timeout(5) * 1000
    # Paced by the audio clock: playing took as long as the audio lasts.
    duration = s["samplesPlayed"] / rate
    wall = (s["drainedAt"] - s["playStartedAt"]) / 1000
    assert 0.9 * duration <= wall <= 1.5 * duration + timeout(2), (wall, duration)
    assert s["wavePeak"] > 0.05  # the audio went through the graph the waveform taps
    # Everything was heard, segment by segment.
    heard = s["heard"]
    assert len(heard["segments"]) >= 2
    assert all(seg["status"] == "heard" for seg in heard["segments"])
    assert words(heard["heardText"]) == words(REPLY)
    assert await browser.page.inner_text("#heard mark") == REPLY.rstrip()
    assert "Played to the end" in await browser.page.inner_text("#heard-status")
    assert s["errors"] == []
    await browser.screenshot("browser-turn.png")
    assert browser.problems == [] and browser.foreign == []


async def test_stop_barges_in(browser: Browser) -> None:
    page = browser.page
    await page.evaluate("([text, rate]) => { window.voicews.speak(text, rate); }", [LONG, 40])
    s = await browser.wait_for("s.samplesPlayed > 1.5 * s.sampleRate", 30)
    assert s["sending"]  # the turn is live: the text is still streaming in

    heard = await page.evaluate("window.voicews.stop()")
    stopped = await browser.state()
    assert stopped["stopped"] and not stopped["playing"] and not stopped["sending"]
    assert stopped["bufferedMs"] == 0  # the jitter buffer was flushed
    played = stopped["samplesPlayed"]
    assert played >= s["samplesPlayed"]
    # Nothing more is played, and late frames of the cut turn are dropped.
    await asyncio.sleep(0.5)
    later = await browser.wait_for("s.turnDone !== null", 10)
    assert later["samplesPlayed"] == played and later["bufferedMs"] == 0
    assert later["samplesReceived"] == stopped["samplesReceived"]
    assert later["turnDone"]["cancelled"] is True
    assert later["turnDone"]["samples"] >= played

    # What was heard: a prefix of the text, up to a segment that was partly heard.
    order = {"heard": 0, "partial": 1, "unheard": 2}
    ranks = [order[seg["status"]] for seg in heard["segments"]]
    assert ranks[0] < 2 and ranks == sorted(ranks) and ranks.count(1) <= 1, heard["segments"]
    heard_words = words(heard["heardText"])
    assert 0 < len(heard_words) < len(words(LONG))
    assert words(LONG)[: len(heard_words)] == heard_words
    assert heard["heardEnd"] > 0
    assert await page.inner_text("#heard mark") == LONG[: heard["heardEnd"]]
    # The server placed the words, so the page and the server agree to the word.
    assert later["turnDone"]["heardText"] == heard["heardText"]
    assert await page.locator("#heard .unheard").count() == 1
    assert "Stopped after" in await page.inner_text("#heard-status")
    await browser.screenshot("browser-barge-in.png")

    # The session goes on: the next turn plays normally.
    await page.evaluate("(text) => window.voicews.speak(text, 0)", "All right, go ahead.")
    after = await browser.wait_for("s.drained", 30)
    assert after["samplesPlayed"] == after["samplesReceived"] == after["turnDone"]["samples"] > 0
    # This turn checks the session, not the server's pace: the player itself never starves.
    assert after["underruns"] == after["lateUnderruns"], await browser.log()
    assert not after["turnDone"]["cancelled"]
    assert after["errors"] == []
    assert browser.problems == [] and browser.foreign == []


async def test_resampling_player(browser: Browser, server: VoicewsServer) -> None:
    """A context at another rate than the server's (as some browsers force): the worklet
    resamples, and still plays every sample once, without an underrun."""
    other = await Browser.open(browser.page.context, server.http_url, "/?context_rate=48000")
    try:
        await other.page.evaluate("(text) => window.voicews.speak(text, 0)", REPLY)
        s = await other.wait_for("s.drained", 60)
        assert (s["contextRate"], s["sampleRate"]) == (48000, 22050)
        assert s["samplesPlayed"] == s["samplesReceived"] == s["turnDone"]["samples"] > 0
        # This checks the resampler; audio the server delivers late (a busy machine) is not
        # the player's fault, but the player never starves with audio at hand.
        assert s["underruns"] == s["lateUnderruns"], await other.log()
        assert s["wavePeak"] > 0.05
        duration = s["samplesPlayed"] / s["sampleRate"]
        wall = (s["drainedAt"] - s["playStartedAt"]) / 1000
        assert 0.9 * duration <= wall <= 1.5 * duration + timeout(2), (wall, duration)
        assert other.problems == [] and other.foreign == []
    finally:
        await other.page.close()


async def test_output_rate_choice(browser: Browser, server: VoicewsServer) -> None:
    """48 kHz or the voice's own rate: ``?sample_rate=48000`` preselects it, the page asks the
    server for it at connect and plays it with no resampling of its own; choosing the other
    reconnects at the voice's rate."""
    other = await Browser.open(browser.page.context, server.http_url, "/?sample_rate=48000")
    try:
        assert await other.page.input_value("#output-rate") == "48000"
        await other.page.evaluate("(text) => window.voicews.speak(text, 0)", REPLY)
        s = await other.wait_for("s.drained", 60)
        assert (s["contextRate"], s["sampleRate"]) == (48000, 48000)
        assert s["samplesPlayed"] == s["samplesReceived"] == s["turnDone"]["samples"] > 2 * 48000
        assert s["underruns"] == s["lateUnderruns"], await other.log()
        assert s["gaps"] == 0 and s["wavePeak"] > 0.05
        await other.page.select_option("#output-rate", "0")
        s = await other.wait_for("s.connected && s.sampleRate === 22050", 10)
        await other.page.evaluate("(text) => window.voicews.speak(text, 0)", "Back to normal.")
        s = await other.wait_for("s.drained", 30)
        assert s["contextRate"] == s["sampleRate"] == 22050
        assert other.problems == [] and other.foreign == []
    finally:
        await other.page.close()


async def test_opus_frames_decode_with_webcodecs(browser: Browser, server: VoicewsServer) -> None:
    """PROTOCOL.md's browser recipe: each opus frame is one packet for WebCodecs' AudioDecoder,
    which gives back exactly the samples the frames count (the lookahead included)."""
    async with await RealtimeClient.connect(server.url + "?format=opus") as client:
        turn = await client.speak("Hello there, how can I help?", timeout=timeout(20))
    packets = [base64.b64encode(frame.pcm).decode() for frame in turn.frames]
    decoded = await browser.page.evaluate(
        """async (packets) => {
          const sizes = [];
          let error = null;
          const decoder = new AudioDecoder({
            output: (data) => { sizes.push(data.numberOfFrames); data.close(); },
            error: (e) => { error = String(e); },
          });
          decoder.configure({ codec: "opus", sampleRate: 48000, numberOfChannels: 1 });
          packets.forEach((packet, i) => {
            const data = Uint8Array.from(atob(packet), (c) => c.charCodeAt(0));
            decoder.decode(new EncodedAudioChunk(
              { type: "key", timestamp: i * 20000, duration: 20000, data }));
          });
          await decoder.flush();
          return { sizes, error };
        }""",
        packets,
    )
    assert decoded["error"] is None
    assert decoded["sizes"] == [frame.samples for frame in turn.frames]
    assert sum(decoded["sizes"]) == turn.done.samples  # type: ignore[union-attr]
