"""The demos on the built-in simulator: ``harness`` (``loadgen demo``, the whole harness
end to end) and ``disagg`` (``loadgen demo-compare``, monolith against prefill/decode
disaggregation; its offline half in ``offline``); ``realengine`` puts ``loadgen demo`` on a
real vLLM server instead (``--engine vllm``). Part of the composition root: nothing
outside ``loadgen.cli`` may import it.
"""

__all__ = ["disagg", "harness", "offline", "realengine"]
