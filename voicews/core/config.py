"""What a session enforces and how it paces itself: one frozen value per server."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..audio import StitchConfig
from ..encoding import Encoding
from ..engines.base import SynthesisOptions
from ..text.normalize import NormalizeOptions
from ..text.numbers import Locale
from ..text.segmenter import SegmenterConfig
from .conversation import AgentConfig

Normalization = Literal["auto", "off"]
"""``auto``: agent text read the way a person would say it (``voicews.text``); ``off``: as
written, the phonemizer guessing."""


@dataclass(frozen=True, slots=True)
class SessionConfig:
    max_message_bytes: int = 64 * 1024
    max_turn_text_chars: int = 20_000
    max_pending_text_chars: int = 4_000
    max_pending_audio_ms: int = 2_000
    """Audio queued for a socket beyond this pauses the session's synthesis."""
    frame_ms: int = 40
    idle_flush_ms: int = 500
    """Text that stops arriving mid-sentence (without ``end_text``) is spoken after this."""
    stall_guard_ms: int = 150
    """Cut at a clause once the listener has less audio left than this margin plus the
    synthesis latency the session has been seeing; at any word once a third of it is left."""
    max_messages_per_second: int = 200
    """Sustained client message rate; bursts of one second's worth are allowed."""
    idle_timeout_s: float = 300.0
    """A session with no turn and no message for this long is closed."""
    max_turn_seconds: float = 600.0
    """A turn still live this long after its ``turn_reset`` is cut."""
    max_contexts: int = 8
    """Contexts (turns named by ``context_id``) one socket may hold open at once."""
    context_idle_s: float = 20.0
    """A context with nothing to speak and no message for this long is closed."""
    segmenter: SegmenterConfig = field(default_factory=SegmenterConfig)
    stitch: StitchConfig = field(default_factory=StitchConfig)
    agent: AgentConfig | None = None
    voices: tuple[str, ...] = ()
    """The engine's voices (``engines.engine_voices``), the default first."""
    reading: NormalizeOptions = field(default_factory=NormalizeOptions)
    """How text is read by default: the locale, and the server's lexicon (``--lexicon``)."""


@dataclass(frozen=True, slots=True)
class SettingsUpdate:
    """Voice options and reading from the next segment, the output format from the next turn;
    a field left None keeps its value."""

    speed: float | None = None
    voice: str | None = None
    chunk_frames: int | None = None
    overlap_frames: int | None = None
    sample_rate: int | None = None
    format: Encoding | None = None
    normalization: Normalization | None = None
    locale: Locale | None = None
    lexicon: Mapping[str, str] | None = None
    """The session's own words (word -> spoken form), over the server's; replaces the
    session's earlier ones."""
    context_idle_s: float | None = None


@dataclass(frozen=True, slots=True)
class Speaking:
    """How a session's next segment is spoken: the engine's options, and how its text is
    read (None: as written)."""

    options: SynthesisOptions
    reading: NormalizeOptions | None
