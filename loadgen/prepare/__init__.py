"""Request bodies built before they are due: ``preparer`` turns a trace row into the
request the client sends (on the event loop, ahead of its due time); for traces with
images or huge prompts, ``ahead`` starts one process (``worker``) that builds bodies
further ahead, within a byte bound, so the loop only takes them. Must not import the
analyzers or click.
"""

__all__ = ["ahead", "preparer", "worker"]
