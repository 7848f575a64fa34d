"""How many conversations one box keeps smooth, and what long mixed loads leave behind."""
