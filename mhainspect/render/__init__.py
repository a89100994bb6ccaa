"""Rendering layer: pure functions from Report(s) to text or JSON-ready data (no I/O)."""
