"""Loaders turn a model source into the neutral ModelGraph IR."""
