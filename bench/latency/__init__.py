"""How soon the first audio comes, and whether it keeps coming: one conversation at a time."""
