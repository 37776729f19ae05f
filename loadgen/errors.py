"""Exceptions of the replay engine and its CLI.

Tree::

    LoadgenError                  root; ``exit_code`` is what the CLI returns
    ├── ConfigError               bad option or configuration value (2)
    ├── EndpointError             the endpoint is unreachable, rejects the key or the model (4)
    └── RunDirError               the run directory cannot be created or is not empty (2)

Failures of single requests are never exceptions: they are rows with an ``outcome``.
"""

from __future__ import annotations


class LoadgenError(Exception):
    """Root of the replay engine's errors."""

    exit_code = 2


class ConfigError(LoadgenError):
    """An option or configuration value is invalid."""


class EndpointError(LoadgenError):
    """The endpoint cannot serve the run (unreachable, bad key, unknown model)."""

    exit_code = 4


class RunDirError(LoadgenError):
    """The run directory cannot be used."""
