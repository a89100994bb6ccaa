"""The ONNX front end: ``onnx_result`` is the ONNX reader, one for a local file and a remote one (a
file of a ``Tree``, read through its ``Blob``): it loads the file, checks external-data locations
against the model's folder and hands the graph to the graph front ends' shared step
(``mhainspect.frontends.graphs.result.graph_result``) with the steps only ONNX needs
(``onnx_graph_result``). No printing, no exit codes.
"""

from __future__ import annotations

import dataclasses
import posixpath
from typing import TYPE_CHECKING, Any

from mhainspect.errors import InputError
from mhainspect.frontends.graphs.result import MAX_LISTED, graph_result
from mhainspect.frontends.onnx.loader import read_onnx
from mhainspect.frontends.onnx.locations import external_location_escapes
from mhainspect.frontends.onnx.qoperator import as_qdq
from mhainspect.frontends.onnx.sequences import as_slices
from mhainspect.frontends.onnx.values import DataFiles, folded_copies, folded_note, undecided_lookups_note
from mhainspect.ir.graph import ModelGraph
from mhainspect.results import ReportWarning, WarningCode
from mhainspect.results.stages import SourceResult
from mhainspect.sources import beside
from mhainspect.sources.transports.local import local_folder

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mhainspect.sources.blob import Blob
    from mhainspect.sources.tree import Tree

EXTERNAL_DATA_WARNING = "external data location"  # how the warning for locations outside the model folder begins


def _onnx_view(graph: ModelGraph) -> ModelGraph:
    """QLinear ops as DequantizeLinear -> float op -> QuantizeLinear; parts of a tensor sequence as Slices."""
    return as_slices(as_qdq(graph))


def onnx_graph_result(graph: ModelGraph, *, path: str | None = None, fmt: str | None = None,
                      config: Mapping[str, Any] | None = None, config_label: str = "config.json") -> SourceResult:
    """The graph front ends' shared step (``graph_result``) with what only an ONNX graph needs: the
    lookups no values decided (not counted, and why), its own operators in the patterns' terms, the
    copies of parameters its values showed."""
    return graph_result(graph, path=path, fmt=fmt, config=config, config_label=config_label,
                        note=undecided_lookups_note, view=_onnx_view, copies_note=folded_note)


def onnx_result(tree: Tree, path: str, display: str, blob: Blob, *, remote: bool) -> SourceResult:
    """The ONNX reader, for a file of any tree (a local folder or a remote one), named ``display``:
    the graph (``loader.read_onnx``: large payloads skipped, never fetched or touched), the external
    data locations checked (``external_data_warnings``), copies of parameters decided by values read
    where a candidate is (``values.folded_copies``: a few elements, never a whole tensor), and the
    config.json beside the file (read meanwhile, when remote)."""
    from mhainspect.sources.parallel import Jobs

    try:
        with Jobs(remote) as jobs:
            config_job = jobs.submit(config_beside, tree, path)
            graph, view = read_onnx(blob, display)
            try:
                escaping = external_data_warnings(tree, path, graph)
                if escaping:
                    graph = dataclasses.replace(graph, warnings=graph.warnings + tuple(escaping))
                graph = folded_copies(graph, view, data_files(tree, path))
            finally:
                view.close()
            config = config_job.result()
        return onnx_graph_result(graph, path=display, fmt="onnx", config=config,
                                 config_label="config.json beside the model" if config is not None else "")
    except InputError as exc:
        if not str(exc).startswith((display, blob.name)):  # a line names the file it is about
            raise InputError(f"{display}: {exc}") from None
        raise


def config_beside(tree: Tree, path: str) -> dict[str, Any] | None:
    """The Hugging Face config.json beside the model ``path`` (optimum exports ship one), for what
    only a config says (sliding windows, whether the model decodes); None when absent or unreadable."""
    where = beside(path, "config.json")
    if tree.complete and where not in tree.files():
        return None  # the usual case: no config, and the checkpoint reader is not imported
    from mhainspect.frontends.checkpoint.files import config_at

    return config_at(tree, where, False)


def data_files(tree: Tree, path: str) -> DataFiles:
    """The external data files of the model ``path`` of ``tree`` that may be read: beside it, inside
    its folder (``location_escapes``), and in the folder's listing; never anything else."""
    def data_file(location: str) -> Blob | None:
        where = beside(path, posixpath.normpath(location.replace("\\", "/")))
        if not location or location_escapes(tree, path, location) is not None \
                or (tree.complete and where not in tree.files()):
            return None
        return tree.blob(where)

    return data_file


def location_escapes(tree: Tree, path: str, location: str) -> str | None:
    """Why an external-data ``location`` of the model ``path`` leaves the model's folder, or None:
    decided from the text alone, and on this machine also by where a symlink inside the folder
    resolves (lstat/readlink only: the location itself is never opened)."""
    folder = local_folder(tree, posixpath.dirname(path))
    return external_location_escapes(folder, location)


def external_data_warnings(tree: Tree, path: str, graph: ModelGraph) -> list[ReportWarning]:
    """One warning per external-data location outside the model's folder (never opened, never read)."""
    users: dict[str, list[str]] = {}
    for name, t in graph.weights.items():
        if t.location is not None:
            users.setdefault(t.location, []).append(name)
    out: list[ReportWarning] = []
    code = WarningCode.EXTERNAL_DATA_OUTSIDE
    for location, names in users.items():
        if len(out) >= MAX_LISTED:
            out.append(ReportWarning(f"{EXTERNAL_DATA_WARNING}s: more locations outside the model folder not listed",
                                     code))
            break
        why = location_escapes(tree, path, location)
        if why is not None:
            out.append(ReportWarning(f"{EXTERNAL_DATA_WARNING} {location!r} ({why}) of {len(names)} weight(s), first "
                                     f"'{names[0]}': refused, never opened (the audit reads no external data)", code))
    return out
