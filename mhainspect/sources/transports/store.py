"""Object stores (``s3://``, ``gs://``, ``az://``, ...) through fsspec, as a folder of blobs.

Credentials, endpoints and options are fsspec's and the store library's own (``AWS_*`` variables
and ~/.aws for s3fs, ``GOOGLE_APPLICATION_CREDENTIALS`` for gcsfs, ``AZURE_STORAGE_*`` for
adlfs, fsspec's ``FSSPEC_<PROTOCOL>_<OPTION>`` variables). A file argument lists its folder once
(its size and its siblings: config.json beside it, the other parts of a split GGUF model); a
folder argument lists everything below it once. Each read is one ranged GET (``cat_file``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from mhainspect.errors import InputError, MissingDependencyError
from mhainspect.sources import deadline
from mhainspect.sources.address import StoreRef
from mhainspect.sources.blob import Blob
from mhainspect.sources.transports.http import Counters
from mhainspect.sources.tree import MAX_LISTED_FILES, Listed, listed_files

# The fsspec implementation each protocol needs, and the extra that installs it (the install hint).
BACKENDS = {"s3": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs", "abfss": "adlfs"}
EXTRAS = {"s3fs": "s3", "gcsfs": "gcs", "adlfs": "azure"}
counters = Counters()  # calls made to the store (listings and reads) and bytes read, for tests and benchmarks
_COUNT_LOCK = threading.Lock()
_LISTINGS: dict[tuple[str, str, bool], dict[str, int | None]] = {}


def _count(n_bytes: int = 0) -> None:
    with _COUNT_LOCK:
        counters.requests += 1
        counters.bytes += n_bytes


def _failure(name: str, exc: BaseException) -> InputError:
    if isinstance(exc, FileNotFoundError):
        return InputError(f"{name}: not found")
    if isinstance(exc, PermissionError):
        return InputError(f"{name}: access denied (check the store's credentials)")
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return InputError(f"{name}: cannot read from the store ({type(exc).__name__}{': ' + text if text else ''})")


async def _s3_find(fs: Any, root: str) -> list[Any]:
    """Everything below ``root``, s3fs stopping its pages one key past MAX_LISTED_FILES (a listing
    past it is refused anyway)."""
    return list((await fs._find(root, detail=True, max_items=MAX_LISTED_FILES + 1)).values())


async def _gcs_find(fs: Any, root: str) -> list[Any]:
    """Everything below ``root``, gcsfs stopping its pages one object past MAX_LISTED_FILES (its
    ``find`` takes no bound); nothing there: ``find``'s own answer (``root`` may be an object)."""
    items, _prefixes = await fs._do_list_objects(root, max_results=MAX_LISTED_FILES + 1, delimiter="")
    return list(items) if items else list((await fs._find(root, detail=True)).values())


# A folder's listing bounded in entries, where the backend can stop paging. Elsewhere (adlfs), and
# for empty pages without end, the model's deadline cuts a listing that pages on (``_await``).
_FOLDER_LISTERS = {"s3fs": _s3_find, "gcsfs": _gcs_find}


def _call(fs: Any, name: str, method: str, *args: Any, **kwargs: Any) -> Any:
    """``fs.method(*args, **kwargs)`` within the model's deadline (the default one outside a model):
    an async filesystem's coroutine (s3fs, gcsfs, adlfs) is cancelled when the time is up, so a
    store that stalls, drips or pages without end cannot hold the run (the store libraries' own
    timeouts are per request, and a listing is many requests)."""
    deadline.check(name)
    if not getattr(fs, "async_impl", False) or not hasattr(fs, "_" + method):
        return getattr(fs, method)(*args, **kwargs)  # a synchronous store: its own timeouts
    return _await(fs, name, getattr(fs, "_" + method)(*args, **kwargs))


def _await(fs: Any, name: str, coroutine: Any) -> Any:
    """``coroutine`` run on the async filesystem's loop, cancelled when the model's time is up."""
    import asyncio

    from fsspec.asyn import sync

    model = deadline.current()
    left = model.left() if model is not None else deadline.DEFAULT_MODEL_TIMEOUT
    try:
        return sync(fs.loop, asyncio.wait_for, coroutine, max(0.001, left))
    except (asyncio.TimeoutError, TimeoutError):
        if model is not None and model.left() <= 0:
            raise deadline.expired(name, model) from None
        raise InputError(f"{name}: the store did not answer within {left:.3g} s") from None


async def _bounded_body(status: int | None, content_range: str, encoding: str, read: Any, start: int, end: int,
                        name: str) -> bytes:
    """A ranged answer's body [start, end), read no further than the range's length whatever the
    answer holds. A 200 is the object from its first byte (used from offset 0, as over HTTP); a
    Content-Range that starts elsewhere, or a compressed body (not the object's bytes at their
    offsets, and never inflated), is refused."""
    if encoding.strip().lower() not in ("", "identity"):
        raise InputError(f"{name}: the store sent its answer compressed (Content-Encoding {ascii(encoding[:40])}) "
                         "though asked for the bytes as stored; not read")
    if status == 200 and start != 0:
        raise InputError(f"{name}: the store ignores Range requests (it answered with the whole object); reading a "
                         "header from it would mean downloading the file, which mhainspect never does")
    if status == 206 and not content_range.startswith(f"bytes {start}-"):
        raise InputError(f"{name}: the store sent {content_range[:60]!r} for a request starting at {start}")
    out = bytearray()
    while len(out) < end - start:
        chunk = await read(end - start - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


async def _s3_range(fs: Any, path: str, start: int, end: int, name: str) -> bytes:
    """One ranged GetObject through s3fs's own call (its retries and errors), its body bounded:
    s3fs's cat_file reads the whole body, so a store that ignores Range would be downloaded whole."""
    bucket, key, version = fs.split_path(path)
    extra = {"VersionId": version} if version else {}
    answer = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}", **extra)
    body = answer["Body"]
    try:
        return await _bounded_body(answer.get("ResponseMetadata", {}).get("HTTPStatusCode"),
                                   str(answer.get("ContentRange") or ""), str(answer.get("ContentEncoding") or ""),
                                   body.read, start, end, name)
    finally:
        body.close()  # bytes left unread: the connection is dropped, not drained


async def _gcs_range(fs: Any, path: str, start: int, end: int, name: str) -> bytes:
    """One ranged media GET with gcsfs's session, headers and retries, its body bounded: gcsfs's
    cat_file reads the whole body (and aiohttp inflates a compressed one)."""
    from gcsfs.retry import retry_request, validate_response

    async def attempt() -> bytes:
        await fs._set_session()
        headers = fs._get_headers({"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"})
        async with fs.session.request("GET", fs.url(path), headers=headers, timeout=fs.requests_timeout) as r:
            if r.status not in (200, 206):
                validate_response(r.status, await r.content.read(64 * 1024), path)  # gcsfs's errors (retried)
                raise InputError(f"{name}: the store answered HTTP {r.status}")
            return await _bounded_body(r.status, r.headers.get("Content-Range", ""),
                                       r.headers.get("Content-Encoding", ""), r.content.read, start, end, name)

    return bytes(await retry_request(retries=6)(attempt)())


# Ranged reads bounded to the range's length, for the backends whose cat_file reads whatever body comes.
_RANGE_READERS = {"s3fs": _s3_range, "gcsfs": _gcs_range}


def _filesystem(ref: StoreRef) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError:
        wanted = EXTRAS.get(BACKENDS.get(ref.protocol, ""), "remote")
        raise MissingDependencyError(f'{ref.text}: object stores are read through fsspec: pip install "mhainspect[{wanted}]"'
                                     ) from None
    try:
        fs, path = fsspec.core.url_to_fs(ref.url)
    except ImportError:
        backend = BACKENDS.get(ref.protocol, "the fsspec backend for it")
        extra = EXTRAS.get(backend)
        hint = f'pip install "mhainspect[{extra}]"' if extra else f"pip install {backend}"
        raise MissingDependencyError(f"{ref.text}: {ref.protocol}:// needs {backend}: {hint}") from None
    except (ValueError, TypeError) as exc:
        raise InputError(f"{ref.text}: {exc}") from None
    return fs, str(path).rstrip("/")


class StoreBlob:
    """One object, read by ranges."""

    speculative = True

    def __init__(self, fs: Any, path: str, name: str, size: int | None) -> None:
        self.fs, self.path, self.name = fs, path, name
        self.basename = path.rsplit("/", 1)[-1]
        self._size = size

    def size(self) -> int:
        if self._size is None:
            try:
                info = _call(self.fs, self.name, "info", self.path)
            except InputError:
                raise
            except Exception as exc:  # the store libraries raise their own types
                raise _failure(self.name, exc) from None
            _count()
            self._size = int(info["size"])
        return self._size

    def known_size(self) -> int | None:
        return self._size

    def read(self, offset: int, length: int) -> bytes:
        size = self.size()
        end = min(offset + length, size)
        if length <= 0 or offset >= end:
            return b""
        bounded = _RANGE_READERS.get(type(self.fs).__module__.split(".")[0])
        try:
            if bounded is not None and getattr(self.fs, "async_impl", False):
                deadline.check(self.name)
                data = bytes(_await(self.fs, self.name, bounded(self.fs, self.path, offset, end, self.name)))
            else:
                data = bytes(_call(self.fs, self.name, "cat_file", self.path, start=offset, end=end))
        except InputError:
            raise
        except Exception as exc:
            raise _failure(self.name, exc) from None
        _count(len(data))
        if len(data) != end - offset:
            raise InputError(f"{self.name}: the store sent {len(data):,} of {end - offset:,} bytes")
        return data

    def tail(self, length: int) -> bytes:
        size = self.size()
        return self.read(max(0, size - length), min(length, size))


class StoreTree(Listed):
    """A folder of an object store: for a file argument, the folder holding it."""

    complete = True

    def __init__(self, ref: StoreRef, as_file: bool) -> None:
        self.ref = ref
        self.fs, path = _filesystem(ref)
        self.root, self.selection = (path.rsplit("/", 1) if as_file and "/" in path else (path, ""))
        self.prefix = ref.url.rstrip("/")
        if as_file:
            self.prefix = self.prefix.rsplit("/", 1)[0]
        self._files = self._list(as_file)

    def _list(self, as_file: bool) -> dict[str, int | None]:
        """The files below the root (for a file argument: beside it), listed once for the process (a
        folder argument is expanded, then each model read, from one listing)."""
        key = (self.ref.protocol, self.root, as_file)
        with _COUNT_LOCK:
            kept = _LISTINGS.get(key) or (self._from_folder_listing() if as_file else None)
        if kept is not None:
            return kept
        listed = self._list_now(as_file)
        with _COUNT_LOCK:
            _LISTINGS[key] = listed
        return listed

    def _from_folder_listing(self) -> dict[str, int | None] | None:
        """The files beside a file argument, from a listing of a folder above it (kept already)."""
        for (protocol, root, as_file), files in _LISTINGS.items():
            if protocol != self.ref.protocol or as_file or not (self.root + "/").startswith(root.rstrip("/") + "/"):
                continue
            sub = self.root[len(root.rstrip("/")):].strip("/")
            prefix = sub + "/" if sub else ""
            return {p[len(prefix):]: size for p, size in files.items()
                    if p.startswith(prefix) and "/" not in p[len(prefix):]}
        return None

    def _list_now(self, as_file: bool) -> dict[str, int | None]:
        lister = _FOLDER_LISTERS.get(type(self.fs).__module__.split(".")[0])
        try:
            if as_file:
                entries = _call(self.fs, self.ref.text, "ls", self.root, detail=True)
            elif lister is not None and getattr(self.fs, "async_impl", False):
                deadline.check(self.ref.text)
                entries = _await(self.fs, self.ref.text, lister(self.fs, self.root))
            else:
                entries = list(_call(self.fs, self.ref.text, "find", self.root, detail=True).values())
        except InputError:
            raise
        except Exception as exc:
            raise _failure(self.ref.text, exc) from None
        _count()
        root = self.root.rstrip("/") + "/"

        def files() -> Iterator[tuple[str, int | None]]:
            for e in entries:
                name = str(e.get("name", "")).rstrip("/")
                if e.get("type") == "directory" or not name.startswith(root):
                    continue
                size = e.get("size")
                yield name[len(root):], size if isinstance(size, int) else None

        return listed_files(files(), self.ref.text)

    def files(self) -> Mapping[str, int | None]:
        return self._files

    def name(self, path: str) -> str:
        return f"{self.prefix}/{path}" if path else self.prefix

    def blob(self, path: str) -> Blob:
        return StoreBlob(self.fs, f"{self.root}/{path}", self.name(path), self._files.get(path))
