"""The compute side: what the engine runs next, and how windows are batched for a GPU."""
