"""mhainspect: audit the multi-head-attention blocks of a model without running it."""

__version__ = "0.1.0"
