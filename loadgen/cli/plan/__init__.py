"""``loadgen plan``: the group (``group``, the budget report) and its subcommands.

``calibrate`` fits step-time profiles, ``claim`` checks a tokens-per-second claim,
``admission`` runs the offline engine for what admission control does at a load, ``chunk``
compares chunk sizes at a load and recommends one; ``flags``
holds the options they share. Part of the composition root: nothing outside
``loadgen.cli`` may import it.
"""

__all__ = ["admission", "calibrate", "chunk", "claim", "flags", "group"]
