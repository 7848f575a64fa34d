"""The LLM side of a voice agent: a reply is spoken while the model is still writing it.

``convert`` turns a GGUF file (the bundled SmolLM2-135M-Instruct) into a normal mlx-lm model
directory, ``generate`` streams a reply's text deltas with a stop check between tokens, and
``agent`` runs the multi-turn loop against a voicews server with barge-in.

Nothing here touches MLX at import time: MLX streams are bound to the thread that uses them,
so every MLX call must happen on the one thread the caller chose for the model.
"""
