"""Importers of public trace formats into the workload table (one module per format)."""
