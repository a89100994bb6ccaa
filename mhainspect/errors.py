"""Errors that the CLI turns into one line on stderr and exit code 2."""


class InputError(Exception):
    """The model could not be read: missing, unreadable, corrupt or unsupported input."""


class MissingDependencyError(InputError):
    """An optional dependency (torch, safetensors) is needed for this input."""
