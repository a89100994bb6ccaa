"""Models where they live: Hugging Face Hub repos, the local Hugging Face cache, HTTP(S) URLs and
object stores, read through one ranged-read interface (``blob.Blob``) that local files serve too.

- ``locate``: what a remote argument names (text only);
- ``blob``: the interface, local files, and the two read patterns (a header prefix, a sparse walk);
- ``http``: ranged GETs with keep-alive, redirects, retries and caps; ``hub``: the Hub (token,
  endpoint, revision, offline mode and cache as the Hub's own tools resolve them); ``store``: fsspec;
- ``tree``: a remote folder (listing + blobs) and which models it holds; ``frontend``: a remote
  argument -> SourceResult through the format readers.

A local model imports none of these modules: only the scheme test below, which tells a remote
argument from a local path.
"""

HF_SCHEME = "hf://"
STORE_SCHEMES = ("s3://", "gs://", "gcs://", "az://", "abfs://", "abfss://")
URL_SCHEMES = ("http://", "https://")


def is_remote(spec: str) -> bool:
    """Whether ``spec`` names a model somewhere else than this machine (by its scheme)."""
    low = spec[:8].lower()
    return low.startswith((HF_SCHEME, *URL_SCHEMES, *STORE_SCHEMES))
