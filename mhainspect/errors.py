"""Errors that the CLI turns into one line on stderr and exit code 2."""


class InputError(Exception):
    """The model could not be read: missing, unreadable, corrupt or unsupported input."""


class MissingDependencyError(InputError):
    """An optional dependency (torch, safetensors) is needed for this input."""


# PyPI's default torch wheel on Linux is the multi-GB CUDA build: the hint installs the CPU build
# first, then the extra (torch is then already satisfied).
TORCH_HINT = ('pip install torch --index-url https://download.pytorch.org/whl/cpu && '
              'pip install "mhainspect[torch]"')


def missing_torch(what: str) -> MissingDependencyError:
    """The error for ``what`` ("auditing an nn.Module") without PyTorch installed, with the install line."""
    return MissingDependencyError(f"{what} requires PyTorch, which is not installed; install its CPU build and the "
                                  f"extra: {TORCH_HINT}")


def read_failure(path: object, exc: OSError, *, directory: str = "is a directory, expected a model file") -> str:
    """The one line for an OSError met while reading ``path`` (the CLI prints it and exits 2)."""
    if isinstance(exc, PermissionError):
        return f"{path}: permission denied"
    if isinstance(exc, FileNotFoundError):
        return f"{path}: no such file"
    if isinstance(exc, IsADirectoryError):
        return f"{path}: {directory}"
    return f"{path}: cannot read: {exc.strerror or exc}"
