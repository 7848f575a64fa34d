"""A load generator: many sessions speaking many turns, some cut by barge-in.

Used by ``python -m bench soak`` and the soak test; point it at any running service to check a
deployment (``python -m bench soak --url ws://host:8765/v1/realtime``).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from voicews.client import RealtimeClient, SpokenTurn
from voicews.protocol import AudioFrame

REPLIES = [
    "Sure, I can help with that.",
    "Your order shipped on Monday and should arrive in two to three business days.",
    "It is 18 degrees and cloudy right now, with rain expected later this afternoon.",
    "Good question. The total comes to forty dollars, including tax and shipping. "
    "You can pay it in four parts, with no interest at all.",
    "I moved your meeting to three in the afternoon, and sent the new invite to everyone.",
]


@dataclass
class SoakReport:
    sessions: int
    seconds: float
    turns: int = 0
    cut: int = 0
    audio_seconds: float = 0.0
    missing_turn_done: int = 0
    errors: list[str] = field(default_factory=list)


async def soak(
    url: str,
    sessions: int,
    seconds: float = float("inf"),
    tokens_per_s: float = 50.0,
    barge_in_every: int = 5,
    seed: int = 0,
    turns: int | None = None,
) -> SoakReport:
    """Run ``sessions`` conversations for ``seconds`` (or ``turns`` each, whichever ends
    first); every turn must end with turn_done."""
    report = SoakReport(sessions, seconds)
    deadline = time.perf_counter() + seconds
    limit = turns if turns is not None else -1
    await asyncio.gather(
        *(_conversation(url, deadline, limit, tokens_per_s, barge_in_every, seed + i, report)
          for i in range(sessions))
    )  # fmt: skip
    return report


async def _conversation(
    url: str,
    deadline: float,
    turns: int,
    tokens_per_s: float,
    barge_in_every: int,
    seed: int,
    report: SoakReport,
) -> None:
    rng = random.Random(seed)
    async with await RealtimeClient.connect(url) as client:
        n = 0
        while time.perf_counter() < deadline and n != turns:
            n += 1
            text = rng.choice(REPLIES)
            if barge_in_every and n % barge_in_every == 0:
                await _cut_turn(client, f"{seed}-{n}", text, report)
                continue
            turn = await client.speak(text, turn_id=f"{seed}-{n}", tokens_per_s=tokens_per_s)
            _account(turn, report)


async def _cut_turn(client: RealtimeClient, turn_id: str, text: str, report: SoakReport) -> None:
    """Start a turn, barge in on it after its first audio; both turns must end cleanly."""
    await client.turn_reset(turn_id)
    await client.text_delta(text)  # no end_text: only the barge-in ends this turn
    cut = SpokenTurn(turn_id, client.sample_rate)
    while not cut.frames:
        item = await client.recv(30)
        if isinstance(item, AudioFrame) and item.turn_id == turn_id:
            cut.frames.append(item)
    await client.turn_reset(turn_id + "-next")
    await asyncio.wait_for(client.collect(cut), 30)
    report.cut += 1
    if cut.done is not None and not cut.done.cancelled:
        report.errors.append("barge-in did not cancel")
    _account(cut, report)
    after = SpokenTurn(turn_id + "-next", client.sample_rate)
    await client.text_delta("Okay, moving on.")
    await client.end_text()
    await asyncio.wait_for(client.collect(after), 30)
    _account(after, report)


def _account(turn: SpokenTurn, report: SoakReport) -> None:
    report.turns += 1
    report.audio_seconds += turn.duration
    if turn.done is None:
        report.missing_turn_done += 1
    report.errors += [e.code for e in turn.errors]
