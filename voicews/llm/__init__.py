"""The language model of a voice agent (:mod:`voicews.agent` holds the conversation).

``convert`` turns a GGUF file (the bundled SmolLM2-135M-Instruct) into a normal mlx-lm model
directory, ``generate`` streams a reply's text
deltas with a stop check between tokens, and ``local`` runs a model on a thread of its own
for the client-side agent.

Nothing here touches MLX at import time: MLX streams are bound to the thread that uses them,
so every MLX call must happen on the one thread the caller chose for the model.
"""
