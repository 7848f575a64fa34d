"""Where a long Kokoro piece's two decoder windows meet, and how they are joined (no model)."""

from __future__ import annotations

import numpy as np

from voicews.engines.kokoro.assets import SAMPLES_PER_FRAME
from voicews.engines.kokoro.windows import CONTEXT, FADE, WINDOW_FROM, cut, joined, spans

GAP, SOUND = 16, 50


def test_a_short_piece_is_decoded_whole() -> None:
    tokens = [0, SOUND, GAP, SOUND, 0]
    assert cut([5, 40, 10, 40, 5], tokens, GAP) is None  # 100 frames
    assert cut([5, 60, 0, 60, 5], tokens, GAP) is None  # a gap of no frames is no gap
    assert cut([5, WINDOW_FROM, 5], [0, SOUND, 0], GAP) is None  # no gap at all


def test_a_long_piece_is_cut_mid_gap_nearest_its_middle() -> None:
    tokens = [0, SOUND, GAP, SOUND, GAP, SOUND, 0]
    kept = [5, 40, 10, 30, 6, 60, 5]  # 156 frames; gaps at 45-55 and 85-91
    assert cut(kept, tokens, GAP) == 88
    kept = [5, 40, 10, 90, 6, 5, 5]  # 161 frames; gaps at 45-55 and 145-151
    assert cut(kept, tokens, GAP) == 50
    ends = [5, 30, 2, 80, 30, 2, 5]  # both gaps less than a second from an end
    assert cut(ends, [0, SOUND, GAP, SOUND, SOUND, GAP, 0], GAP) is None


def test_the_windows_overlap_by_the_context_each_way() -> None:
    assert spans(200, 100) == ((0, 100 + CONTEXT), (100 - CONTEXT, 200))
    assert spans(200, 195) == ((0, 200), (195 - CONTEXT, 200))


def test_the_join_crossfades_the_windows_and_keeps_every_sample() -> None:
    total, at = 160, 70
    (_, stop), (start, _) = spans(total, at)
    speech = np.sin(np.arange(total * SAMPLES_PER_FRAME) / 7).astype(np.float32)
    first, second = speech[: stop * SAMPLES_PER_FRAME], speech[start * SAMPLES_PER_FRAME :]
    head = first[: at * SAMPLES_PER_FRAME - FADE]
    rest = joined(first, second, at, start)
    assert len(head) + len(rest) == len(speech)
    np.testing.assert_allclose(np.concatenate([head, rest]), speech, atol=1e-6)
    quiet = joined(first, np.zeros_like(second), at, start)  # the first fades out over 2 FADE
    assert abs(quiet[0]) > 0.99 * abs(first[len(head)]) and not quiet[2 * FADE :].any()
