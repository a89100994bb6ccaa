"""Reports -> SARIF 2.1.0 (code scanning). Pure: returns a JSON-ready dict or text.

One run; ``tool.driver.rules`` lists every MHA code, the gates and the --verify contradiction
rule; each result points at the model file (``physicalLocation.artifactLocation.uri``) and names
the block as a logical location. Levels: warning -> ``warning``, info -> ``note``, error ->
``error``; a block the --verify run contradicts is a ``warning``; failed gates are ``error``
results of the gate rules.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from mhainspect import __version__
from mhainspect.analysis.flags import FLAG_CODES
from mhainspect.analysis.gates import GateFailure
from mhainspect.render import links
from mhainspect.render.cells import verify_label
from mhainspect.render.safe import sarif_text
from mhainspect.results import FailedInput, Flag, Report, Severity, contradicted

__all__ = ["FINGERPRINT", "FLAG_ANCHORS", "GATE_RULES", "SARIF_SCHEMA", "VERIFY_RULE", "render_sarif", "sarif_dict"]

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
# partialFingerprints key: one finding (rule, model file, block) keeps its value from run to run,
# so code scanning tracks it as one alert (models have no lines to hash).
FINGERPRINT = "mhainspectFinding/v1"
# GitHub's heading anchors in docs/flags.md (tests check them against the headings).
FLAG_ANCHORS: dict[str, str] = {
    "MHA001": "mha001--hd_k--d_model-warning",
    "MHA002": "mha002--d_k--d_v-info",
    "MHA003": "mha003--scale--1d_k-info",
    "MHA004": "mha004--head-count-not-identifiable-warning",
    "MHA005": "mha005--groupedmulti-query-attention-info",
    "MHA006": "mha006--layout-differs-between-blocks-info",
    "MHA007": "mha007--sources-disagree-warning",
    "MHA008": "mha008--no-output-projection-warning",
}
# Gate rules: id -> (short description, anchor in docs/cli.md).
GATE_RULES: dict[str, tuple[str, str]] = {
    "max-params": ("the model has more parameters than --max-params allows", "gates"),
    "max-attention-params": ("the attention blocks hold more parameters than --max-attention-params allows",
                             "gates"),
    "max-weight-bytes": ("the stored weights take more bytes than --max-weight-bytes allows", "--max-weight-bytes-size"),
    "max-kv-cache": ("the KV cache at --context takes more bytes than --max-kv-cache allows", "--max-kv-cache-size"),
    "fail-on": ("the model has a flag whose code is listed in --fail-on", "gates"),
    "fail-on-contradiction": ("a --verify run contradicts a block's static head count (--fail-on-contradiction)",
                              "--fail-on-contradiction"),
}
# A block whose static head count the --verify run contradicts (a warning; the gate above makes it fail).
VERIFY_RULE = ("verify-contradiction", "the onnxruntime run (--verify) contradicts the block's static head count",
               "--verify")
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _severity(flag: Flag) -> Severity:
    return flag.severity if isinstance(flag.severity, Severity) else Severity(str(flag.severity))


def _uri(path: str) -> tuple[str, str | None]:
    """(uri, uriBaseId): relative paths stay relative to the source root, absolute become file: URIs."""
    if os.path.isabs(path):
        return Path(path).as_uri(), None
    return quote(PurePosixPath(os.path.normpath(path).replace(os.sep, "/")).as_posix()), "%SRCROOT%"


def _location(path: str, block: str | None) -> dict[str, Any]:
    uri, base = _uri(path)
    artifact: dict[str, Any] = {"uri": uri}
    if base is not None:
        artifact["uriBaseId"] = base
    location: dict[str, Any] = {"physicalLocation": {"artifactLocation": artifact}}
    if block is not None:
        location["logicalLocations"] = [{"fullyQualifiedName": block, "kind": "module"}]
    return location


def _data(flag: Flag) -> dict[str, int | float | str | None]:
    def clean(value: int | float | str | None) -> int | float | str | None:
        return None if isinstance(value, float) and not math.isfinite(value) else value

    return {str(k): clean(v) for k, v in flag.data}


def _rule(rule_id: str, text: str, help_page: str, docs_base: str | None, level: str) -> dict[str, Any]:
    """A rule; ``helpUri`` (absolute, as SARIF wants) only where the project says where its docs live."""
    rule: dict[str, Any] = {"id": rule_id, "name": rule_id, "shortDescription": {"text": text}}
    if docs_base:
        rule["helpUri"] = docs_base + help_page
    rule["defaultConfiguration"] = {"level": level}
    return rule


def _rules(docs_base: str | None) -> list[dict[str, Any]]:
    """Flag codes, then gates, then the --verify rule; ruleIndex values point into this list."""
    rules = [_rule(code, text, "flags.md" + (f"#{FLAG_ANCHORS[code]}" if code in FLAG_ANCHORS else ""), docs_base,
                   _LEVEL[severity]) for code, (severity, text) in FLAG_CODES.items()]
    rules.extend(_rule(gate, text, f"cli.md#{anchor}", docs_base, "error") for gate, (text, anchor) in GATE_RULES.items())
    rule_id, text, anchor = VERIFY_RULE
    rules.append(_rule(rule_id, text, f"cli.md#{anchor}", docs_base, "warning"))
    return rules


def _fingerprint(rule_id: str, path: str, block: str | None) -> dict[str, str]:
    """``partialFingerprints`` of a finding: a hash of what identifies it across runs (the rule, the
    model file, the block), not of its message, whose numbers may change."""
    key = "\x00".join((rule_id, _uri(path)[0], block or ""))
    return {FINGERPRINT: hashlib.sha256(key.encode("utf-8")).hexdigest()}


def sarif_dict(reports: Iterable[Report], failures: Iterable[GateFailure] = (), *,
               execution_successful: bool = True, docs_base: str | None = None,
               failed: Sequence[FailedInput] = ()) -> dict[str, Any]:
    """The SARIF log as a JSON-ready dict (one run, results in input order). ``docs_base``: where
    docs/ is published (rules get a helpUri); None: the project's own (``render.links``), if any."""
    rules = _rules(docs_base if docs_base is not None else links.docs_base())
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    results: list[dict[str, Any]] = []
    for report in reports:
        for flag in report.flags:
            where = f"{flag.block}: " if flag.block is not None else ""
            results.append({
                "ruleId": flag.code,
                "ruleIndex": index[flag.code],
                "level": _LEVEL[_severity(flag)],
                "message": {"text": sarif_text(where + " ".join(flag.message.split()))},
                "locations": [_location(report.model.path, flag.block)],
                "partialFingerprints": _fingerprint(flag.code, report.model.path, flag.block),
                "properties": {"data": _data(flag)},
            })
        for block, v in contradicted(report):
            results.append({
                "ruleId": VERIFY_RULE[0],
                "ruleIndex": index[VERIFY_RULE[0]],
                "level": "warning",
                "message": {"text": sarif_text(f"{block.name}: {verify_label(v)}")},
                "locations": [_location(report.model.path, block.name)],
                "partialFingerprints": _fingerprint(VERIFY_RULE[0], report.model.path, block.name),
                "properties": {"observed_heads": v.observed_heads, "observed_kv_heads": v.observed_kv_heads,
                               "static_heads": block.num_heads, "static_kv_heads": block.num_kv_heads},
            })
    for failure in failures:
        props: dict[str, Any] = {"actual": failure.actual, "limit": failure.limit}
        if failure.code is not None:
            props["code"] = failure.code
        results.append({
            "ruleId": failure.gate,
            "ruleIndex": index[failure.gate],
            "level": "error",
            "message": {"text": sarif_text(f"gate failed: {failure.message}")},
            "locations": [_location(failure.model, None)],
            "partialFingerprints": _fingerprint(f"{failure.gate}:{failure.code or ''}", failure.model, None),
            "properties": props,
        })
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "mhainspect", "version": __version__, "rules": rules}},
            "invocations": [{"executionSuccessful": execution_successful and not failed,
                             **({"toolExecutionNotifications": [
                                 {"level": "error", "message": {"text": sarif_text(f"{f.input}: {f.message}")},
                                  "locations": [_location(f.input, None)], "properties": {"kind": f.kind}}
                                 for f in failed]} if failed else {})}],
            "results": results,
        }],
    }


def render_sarif(reports: Iterable[Report], failures: Iterable[GateFailure] = (), *,
                 execution_successful: bool = True, docs_base: str | None = None,
                 failed: Sequence[FailedInput] = ()) -> str:
    """The SARIF log as pretty JSON text with a trailing newline (``failed``: a tool execution
    notification per input that could not be audited)."""
    data = sarif_dict(reports, failures, execution_successful=execution_successful, docs_base=docs_base,
                      failed=failed)
    return json.dumps(data, indent=2, allow_nan=False, ensure_ascii=False) + "\n"
