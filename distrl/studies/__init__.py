"""Studies of many runs: sweeps, recipe comparisons and their report, child runs, statistics over seeds."""
