"""Whether an ONNX external-data location stays inside the model's folder: decided before any
byte of it is read, once, by the ONNX reader (``frontend.location_escapes``) for its warnings and
for which data files a copy check may read."""

from __future__ import annotations

import os
import re

__all__ = ["external_location_escapes"]

_DRIVE = r"^[A-Za-z]:"  # compiled by re when an external location is first checked


def external_location_escapes(model_dir: str | None, location: str) -> str | None:
    """Why an external-data ``location`` leaves the model's folder, or None when it stays inside.

    Decided from the text alone, except a symlink inside the folder ``model_dir`` on this machine
    (None: a remote folder, whose names are only names), which is resolved with lstat/readlink
    (``os.path.realpath``): the location itself is never opened.
    """
    if "\x00" in location:
        return "contains a NUL byte"
    if os.path.isabs(location) or location.startswith(("/", "\\")) or re.match(_DRIVE, location):
        return "absolute path"
    if ".." in re.split(r"[\\/]", location):
        return "'..' leaves the model folder"
    if model_dir is None:
        return None
    folder = os.path.realpath(model_dir)
    try:
        target = os.path.realpath(os.path.join(folder, location))
        inside = os.path.commonpath([folder, target]) == folder
    except (OSError, ValueError):
        return "cannot be resolved"
    return None if inside else "a symlink resolving outside the model folder"
