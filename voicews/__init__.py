"""voicews: realtime text-to-speech over WebSocket for voice agents."""

__version__ = "0.1.0"
