"""Deterministic prompt materialisation: text, images and the tokens an image becomes.

Part of ``traces``: nothing else of ours. Pillow and tokenizers are optional extras,
imported inside the functions that need them; ``image_tokens`` needs neither (nor pyarrow),
so the budget arithmetic can use it.
"""

__all__ = [
    "image_tokens",
    "images",
    "maker",
]
