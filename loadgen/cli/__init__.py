"""The composition root: every ``loadgen`` command, one module per command or family.

The only package that imports click, and the only one that touches every other package.
Commands parse options, call library functions and render through ``reports``.
"""
