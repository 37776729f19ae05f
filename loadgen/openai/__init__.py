"""The OpenAI-compatible wire protocol: request bodies, chunk classification, server timings.

Sans-IO and pure; imports ``traces`` only.
"""
