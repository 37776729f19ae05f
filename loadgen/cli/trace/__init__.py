"""``loadgen trace``: the group (``group``) and its subcommands, each imported when run.

``synth`` writes seeded synthetic traces, ``importer`` converts public formats, ``tools``
inspects and transforms trace files (info, validate, slice, scale, merge). Part of the
composition root: nothing outside ``loadgen.cli`` may import it.
"""

__all__ = ["group", "importer", "synth", "tools"]
