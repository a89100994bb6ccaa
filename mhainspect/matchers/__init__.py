"""Attention pattern families. Each module matches one family and explains its near misses."""
