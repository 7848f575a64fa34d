"""Hostile clients, and what each costs a calm session beside it."""
