"""Where bytes come from: HTTP(S), the Hugging Face Hub and its cache, fsspec object stores."""
