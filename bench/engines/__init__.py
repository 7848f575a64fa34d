"""The engines alone and against each other: cost per character, windowed decodes, sessions."""
