"""Models where they live: Hugging Face Hub repos, the local Hugging Face cache, HTTP(S) URLs and
object stores, read through one ranged-read interface (``blob.Blob``) that local files serve too.

- ``locate``: what a remote argument names (text only);
- ``blob``: the interface, local files, and the two read patterns (a header prefix, a sparse walk);
- ``http``: ranged GETs with keep-alive, redirects, retries and caps; ``hub``: the Hub (token,
  endpoint, revision, offline mode and cache as the Hub's own tools resolve them); ``store``: fsspec;
- ``tree``: a remote folder (listing + blobs) and which models it holds; ``frontend``: a remote
  argument -> SourceResult through the format readers.

Nothing here is imported for a local model, except ``blob`` and ``parallel`` (no third-party import).
"""
