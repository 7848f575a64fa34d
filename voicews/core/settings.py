"""What a session's next segments and turns are made with: voice options and how text is read
(from the next segment), the output format (from the next turn). An update applies whole or,
refused, not at all."""

from __future__ import annotations

from dataclasses import replace

from ..encoding import OutputFormat
from ..engines.base import SynthesisOptions
from ..errors import ErrorCode, VoicewsError, unknown_voice
from .config import Normalization, SessionConfig, SettingsUpdate, Speaking


class Settings:
    def __init__(self, config: SessionConfig, audio: OutputFormat) -> None:
        self._config = config
        self.audio = audio
        self.options = SynthesisOptions()
        self.normalization: Normalization = "auto"
        self.reading = config.reading
        self.context_idle_s = config.context_idle_s

    def update(self, changes: SettingsUpdate) -> None:
        """Apply ``changes``; a VoicewsError, and nothing changed, for one that will not do."""
        voices = self._config.voices
        if changes.voice is not None and changes.voice not in voices:
            raise unknown_voice(changes.voice, voices)
        try:
            audio = self.audio.updated(changes.sample_rate, changes.format)
        except ValueError as exc:
            raise VoicewsError(ErrorCode.INVALID_MESSAGE, str(exc)) from None
        options = {
            name: value
            for name in ("speed", "voice", "chunk_frames", "overlap_frames")
            if (value := getattr(changes, name)) is not None
        }
        self.options = replace(self.options, **options)
        self.audio = audio
        self.normalization = changes.normalization or self.normalization
        self.context_idle_s = changes.context_idle_s or self.context_idle_s
        self.reading = replace(
            self.reading,
            locale=changes.locale or self.reading.locale,
            lexicon=self.reading.lexicon
            if changes.lexicon is None
            else {**self._config.reading.lexicon, **changes.lexicon},
        )

    @property
    def voice(self) -> str | None:
        return self.options.voice or next(iter(self._config.voices), None)

    def speaking(self) -> Speaking:
        """How the next segment is spoken."""
        return Speaking(self.options, self.reading if self.normalization == "auto" else None)
