"""AIPerf's dataset files: ``custom`` reads its single_turn and multi_turn JSONL (``trace
import aiperf``), ``dag`` its conversation-DAG JSONL with forks and spawns (``trace import
aiperf_dag``)."""

__all__ = ["custom", "dag"]
