"""What the process benchmarks share: servers as processes, connections and the simulated
player, the measured parts, and the summaries they print."""
