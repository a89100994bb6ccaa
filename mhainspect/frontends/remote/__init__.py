"""A remote MODEL argument -> SourceResult (``frontend``), through the format readers over the
byte layer in ``mhainspect.sources``."""
