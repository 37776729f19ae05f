"""Pure functions of run files (Polars) and the budget model; never imports the replay engine."""
