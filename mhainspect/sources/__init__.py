"""Bytes and listings, with no knowledge of any model format: where a MODEL argument points and
how its files are listed and read by ranges, whatever holds them.

- ``address``: what a remote argument names (text only);
- ``blob``: ``Blob``, the ranged-read interface every reader uses, local files, and the two read
  patterns (a header prefix, a sparse walk); ``parallel``: bounded reads in flight at once;
- ``tree``: ``Tree``, a folder (its listing + a blob for each file);
- ``transports/``: ``http`` (ranged GETs with keep-alive, redirects, retries and caps), ``hub``
  (the Hub and its local cache: token, endpoint, revision, offline mode as the Hub's own tools
  resolve them), ``store`` (fsspec object stores), ``url`` (the folder of one URL).

A local file is read through ``blob`` too (its folder a ``transports.local`` tree); a local model
imports none of the others: only the two helpers below, the scheme test, which tells a remote
argument from a local path, and ``beside``, where a reader finds a file next to the model's.
"""

import posixpath

HF_SCHEME = "hf://"
STORE_SCHEMES = ("s3://", "gs://", "gcs://", "az://", "abfs://", "abfss://")
URL_SCHEMES = ("http://", "https://")


def is_remote(spec: str) -> bool:
    """Whether ``spec`` names a model somewhere else than this machine (by its scheme)."""
    low = spec[:8].lower()
    return low.startswith((HF_SCHEME, *URL_SCHEMES, *STORE_SCHEMES))


def beside(path: str, name: str) -> str:
    """The path of ``name`` in the folder of ``path`` (a tree's POSIX path, or an argument as given)."""
    folder = posixpath.dirname(path)
    return f"{folder}/{name}" if folder else name
