"""Errors that the CLI turns into one line on stderr and exit code 2."""

from enum import Enum


class ErrorKind(str, Enum):
    """Why a model could not be audited, as a batch run records it (a stable vocabulary: what a
    person or a script does next depends on it, not on the message's wording)."""

    NOT_FOUND = "not_found"  # no such file, folder, repository, revision or object
    ACCESS_DENIED = "access_denied"  # permission denied; a private repository; credentials wanted
    GATED = "gated"  # a gated repository whose conditions this account has not accepted
    RATE_LIMITED = "rate_limited"  # the server said to slow down (retried, then given up)
    OFFLINE = "offline"  # offline mode and the model is not in the local cache
    NETWORK = "network"  # unreachable, stalled, a broken connection, a server error (HTTP 5xx)
    BAD_SERVER = "bad_server"  # the server's answers cannot be used: it ignores Range, misreports lengths
    UNSUPPORTED = "unsupported"  # a format mhainspect does not read (named, with its converter)
    MISSING_DEPENDENCY = "missing_dependency"  # an optional extra (torch, remote, ...) is not installed
    INVALID = "invalid"  # corrupt, truncated, past a limit, or not a model: the input itself is wrong
    RESOURCES = "resources"  # out of memory, or nested too deeply to analyse
    INTERNAL = "internal"  # a bug in mhainspect (the message says how to get details)

    @property
    def transient(self) -> bool:
        """A later try may succeed without anything changing on the caller's side."""
        return self in (ErrorKind.RATE_LIMITED, ErrorKind.NETWORK)


class InputError(Exception):
    """The model could not be read: missing, unreadable, corrupt or unsupported input.

    ``kind`` says why in the stable vocabulary (default: the class's, ``invalid`` for this one)."""

    default_kind = ErrorKind.INVALID

    def __init__(self, message: str, kind: ErrorKind | None = None) -> None:
        super().__init__(message)
        self.kind = kind or self.default_kind

    def __reduce__(self) -> tuple[type["InputError"], tuple[str, ErrorKind]]:  # keeps the kind through pickling
        return type(self), (str(self), self.kind)


class MissingDependencyError(InputError):
    """An optional dependency (torch, safetensors) is needed for this input."""

    default_kind = ErrorKind.MISSING_DEPENDENCY


# PyPI's default torch wheel on Linux is the multi-GB CUDA build: the hint installs the CPU build
# first, then the extra (torch is then already satisfied).
TORCH_HINT = ('pip install torch --index-url https://download.pytorch.org/whl/cpu && '
              'pip install "mhainspect[torch]"')


def missing_torch(what: str) -> MissingDependencyError:
    """The error for ``what`` ("auditing an nn.Module") without PyTorch installed, with the install line."""
    return MissingDependencyError(f"{what} requires PyTorch, which is not installed; install its CPU build and the "
                                  f"extra: {TORCH_HINT}")


def os_error_kind(exc: OSError) -> ErrorKind:
    """The kind of an OSError met while reading a model."""
    if isinstance(exc, FileNotFoundError):
        return ErrorKind.NOT_FOUND
    if isinstance(exc, PermissionError):
        return ErrorKind.ACCESS_DENIED
    return ErrorKind.INVALID


def read_error(path: object, exc: OSError, *, directory: str = "is a directory, expected a model file") -> InputError:
    """``read_failure``'s line as an InputError of the matching kind."""
    return InputError(read_failure(path, exc, directory=directory), os_error_kind(exc))


def read_failure(path: object, exc: OSError, *, directory: str = "is a directory, expected a model file") -> str:
    """The one line for an OSError met while reading ``path`` (the CLI prints it and exits 2)."""
    if isinstance(exc, PermissionError):
        return f"{path}: permission denied"
    if isinstance(exc, FileNotFoundError):
        return f"{path}: no such file"
    if isinstance(exc, IsADirectoryError):
        return f"{path}: {directory}"
    return f"{path}: cannot read: {exc.strerror or exc}"
