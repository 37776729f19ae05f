"""Seeded synthetic workload traces: arrivals, lengths, request classes, sessions."""
