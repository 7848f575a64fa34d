"""What a listener hears after the first audio: phrasing, silences, intonation."""
