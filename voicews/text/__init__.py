"""Text before it is spoken: agent text read the way a person would say it."""

from .normalize import NormalizeOptions, Piece, StreamNormalizer, load_lexicon, normalize

__all__ = ["NormalizeOptions", "Piece", "StreamNormalizer", "load_lexicon", "normalize"]
