"""Real engines the tool starts for a user without a GPU (and for its own test suite):
vLLM's OpenAI server on the CPU (``launch``, run as ``serve``) with a tiny random-weight
model built here with no download (``tinymodel``). They need the ``vllm`` extra; nothing
here imports it at import time, and nothing here imports the replay client: these are
endpoints, peers of the simulator (whose READY protocol ``launch`` shares).
"""

__all__ = ["launch", "serve", "tinymodel"]
