"""On-disk truth of llm-loadgen: the workload (trace) table and the run table.

This package depends on pyarrow only and imports nothing else of the project.
"""

from traces.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION"]
