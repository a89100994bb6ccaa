"""Errors that the CLI turns into one line on stderr and exit code 2."""


class InputError(Exception):
    """The model could not be read: missing, unreadable, corrupt or unsupported input."""


class MissingDependencyError(InputError):
    """An optional dependency (torch, safetensors) is needed for this input."""


def read_failure(path: object, exc: OSError, *, directory: str = "is a directory, expected a model file") -> str:
    """The one line for an OSError met while reading ``path`` (the CLI prints it and exits 2)."""
    if isinstance(exc, PermissionError):
        return f"{path}: permission denied"
    if isinstance(exc, FileNotFoundError):
        return f"{path}: no such file"
    if isinstance(exc, IsADirectoryError):
        return f"{path}: {directory}"
    return f"{path}: cannot read: {exc.strerror or exc}"
