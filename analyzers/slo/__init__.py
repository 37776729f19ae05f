"""Service-level objectives: parse them, evaluate them against an analysis, gate a run."""
