"""How urgent a turn's next segment is: the listener's audio left, against synthesis latency.

While the listener has plenty ahead, the segmenter waits for natural, longer segments; as the
audio left nears what synthesizing the pending text is expected to take (the latency per
character this session has been seeing, plus what segments wait for the worker lately, plus a
margin), it cuts at a clause, then at any word. So a loaded worker keeps more audio in hand.
"""

from __future__ import annotations

from .segmenter import Urgency

# Seconds from submitting a segment to its first audio, per character of its text (the
# engine may compute the whole segment first), until measured; short texts count as 20.
_INITIAL_LATENCY_PER_CHAR = 0.1 / 20
_MIN_CHARS = 20
# A timer set for a cut time finds the audio left equal to the guard give or take a rounding
# (or fires a hair early): it still counts, or the cut would wait for the next text to come.
_SLACK = 0.001
_CHARS_PER_SECOND = 15.0  # English speech at speed 1, about


class Pacing:
    """``stall_guard_ms``: the margin; ``max_chars``: the segmenter's cap on a segment."""

    def __init__(self, stall_guard_ms: int, max_chars: int) -> None:
        self._margin = stall_guard_ms / 1000
        self._max_chars = max_chars
        self._latency_per_char = _INITIAL_LATENCY_PER_CHAR
        self._wait = 0.0

    def observe(self, seconds: float, chars: int) -> None:
        """A segment of ``chars`` gave its first audio after ``seconds``: rise at once with a
        slower job, decay slowly after."""
        sample = seconds / max(chars, _MIN_CHARS)
        old = self._latency_per_char
        self._latency_per_char = sample if sample > old else 0.9 * old + 0.1 * sample

    def crowded(self, wait: float) -> None:
        """Segments (every session's) wait ``wait`` seconds for the worker lately."""
        self._wait = wait

    def first_chars(self, speed: float) -> int:
        """The least text a turn's first segment should hold: as much as is heard while the
        next one waits for the worker, lately (none when nothing waits)."""
        return round(self._wait * _CHARS_PER_SECOND * speed)

    def guards(self, pending_chars: int) -> tuple[float, float]:
        """Audio left at which to cut at a clause, and at which to cut at any word.

        Both leave room for synthesizing all the pending text (up to a segment's cap) at the
        latency per character seen so far, and for the worker's queue as it is lately (the
        session's own latency shows it only once its own segments have waited).
        """
        chars = min(pending_chars, self._max_chars)
        latency = self._latency_per_char * max(chars, _MIN_CHARS) + self._wait
        return latency + self._margin, latency + self._margin / 3

    def cut_times(self, end: float | None, pending_chars: int) -> list[float]:
        """When the urgency rises, for a listener whose audio runs out at ``end``."""
        return [] if end is None else [end - guard for guard in self.guards(pending_chars)]

    def urgency(self, ahead: float, pending_chars: int) -> Urgency:
        """With ``ahead`` seconds of audio left for the listener (sent or not)."""
        clause_guard, word_guard = self.guards(pending_chars)
        if ahead <= word_guard + _SLACK:
            return Urgency.CRITICAL
        if ahead <= clause_guard + _SLACK:
            return Urgency.URGENT
        return Urgency.RELAXED
