"""How urgent a turn's next segment is: the listener's audio left, against synthesis latency.

While the listener has plenty ahead, the segmenter waits for natural, longer segments; as the
audio left nears what synthesizing the pending text is expected to take (the latency per
character this session has been seeing, plus a margin), it cuts at a clause, then at any word.
"""

from __future__ import annotations

from .segmenter import Urgency

# Seconds from submitting a segment to its first audio, per character of its text (the
# engine may compute the whole segment first), until measured; short texts count as 20.
_INITIAL_LATENCY_PER_CHAR = 0.1 / 20
_MIN_CHARS = 20


class Pacing:
    """``stall_guard_ms``: the margin; ``max_chars``: the segmenter's cap on a segment."""

    def __init__(self, stall_guard_ms: int, max_chars: int) -> None:
        self._margin = stall_guard_ms / 1000
        self._max_chars = max_chars
        self._latency_per_char = _INITIAL_LATENCY_PER_CHAR

    def observe(self, seconds: float, chars: int) -> None:
        """A segment of ``chars`` gave its first audio after ``seconds``: rise at once with a
        slower job, decay slowly after."""
        sample = seconds / max(chars, _MIN_CHARS)
        old = self._latency_per_char
        self._latency_per_char = sample if sample > old else 0.9 * old + 0.1 * sample

    def guards(self, pending_chars: int) -> tuple[float, float]:
        """Audio left at which to cut at a clause, and at which to cut at any word.

        Both leave room for synthesizing all the pending text (up to a segment's cap) at the
        latency per character seen so far.
        """
        chars = min(pending_chars, self._max_chars)
        latency = self._latency_per_char * max(chars, _MIN_CHARS)
        return latency + self._margin, latency + self._margin / 3

    def cut_times(self, end: float | None, pending_chars: int) -> list[float]:
        """When the urgency rises, for a listener whose audio runs out at ``end``."""
        return [] if end is None else [end - guard for guard in self.guards(pending_chars)]

    def urgency(self, ahead: float, pending_chars: int) -> Urgency:
        """With ``ahead`` seconds of audio left for the listener (sent or not)."""
        clause_guard, word_guard = self.guards(pending_chars)
        if ahead <= word_guard:
            return Urgency.CRITICAL
        if ahead <= clause_guard:
            return Urgency.URGENT
        return Urgency.RELAXED
