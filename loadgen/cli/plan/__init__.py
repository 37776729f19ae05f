"""``loadgen plan``: the group (``group``, the budget report) and its subcommands.

``calibrate`` fits step-time profiles, ``claim`` checks a tokens-per-second claim,
``admission`` runs the offline engine for what admission control does at a load, ``chunk``
compares chunk sizes at a load and recommends one, ``fleet`` sizes a multi-stage pipeline's
fleets from a pipeline file; ``flags``
holds the options they share. Part of the composition root: nothing outside
``loadgen.cli`` may import it.
"""

__all__ = ["admission", "calibrate", "chunk", "claim", "flags", "fleet", "group"]
