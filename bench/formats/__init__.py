"""What each output format costs in first audio and CPU, against plain PCM."""
