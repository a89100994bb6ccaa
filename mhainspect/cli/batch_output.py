"""A --from-file run's list of inputs and its JSON Lines log: one record per model, appended as each
input finishes, so a crash keeps every finished line and a rerun resumes where it stopped."""

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mhainspect.batch import AuditFailure, read_inputs
from mhainspect.cli.output import fail, write_atomic, write_stdout
from mhainspect.errors import InputError, read_failure
from mhainspect.pipeline import Audited
from mhainspect.render.json_render import error_record, input_record, report_to_dict, to_jsonl

if TYPE_CHECKING:
    from collections.abc import Sequence


def read_list(source: str) -> list[str]:
    """The inputs listed in ``source`` (a file, or - for stdin): one per line; blank lines and
    # comments skipped, an input listed twice kept once. One line and exit 2 when unreadable."""
    if source == "-":
        return read_inputs(sys.stdin)
    try:
        with open(source, encoding="utf-8") as fh:
            return read_inputs(fh)
    except UnicodeDecodeError:
        raise fail(f"--from-file {source}: not a text file (UTF-8)") from None
    except OSError as exc:
        raise fail(f"--from-file {read_failure(source, exc, directory='is a directory, expected a list file')}"
                   ) from None


def records(text: str, outcomes: "Sequence[Audited | AuditFailure]") -> list[dict[str, Any]]:
    """The lines of one input: one per model, a failure as an error record."""
    out = []
    for o in outcomes:
        if isinstance(o, AuditFailure):
            out.append(error_record(text, o.kind.value, o.message))
        else:
            out.append(input_record(text, report_to_dict(o.report, gates=o.extras.gates, ignored=o.extras.ignored)))
    return out


@dataclass
class Recorded:
    """What a log already holds: the inputs done, and how many of their records failed or failed a gate."""

    inputs: set[str] = field(default_factory=set)
    errors: int = 0
    gate_failures: int = 0


class JsonlLog:
    """Where the records go: stdout, or a file appended to (one write per input, so the lines of an
    input land together). A file that exists is resumed: its inputs are done, a line cut short by a
    crash is dropped with the input before it (it may be that input's), and with ``retry_errors``
    its error records are dropped so those inputs run again."""

    def __init__(self, path: Path | None, retry_errors: bool) -> None:
        self.path = path
        self.recorded = Recorded()
        self.written = 0
        self.fd: int | None = None
        if path is None:
            return
        if path.is_dir():
            raise fail(f"{path}: is a directory")
        if path.exists() and path.is_file():
            self.recorded = self._resume(path, retry_errors)
        try:
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            raise fail(f"{path}: cannot write: {exc.strerror or exc}") from None

    @staticmethod
    def _resume(path: Path, retry_errors: bool) -> Recorded:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise fail(f"{path}: cannot read: {exc.strerror or exc}") from None
        lines = data.split(b"\n")
        cut = lines.pop() != b""  # the part after the last newline: empty unless a write was cut short
        docs: list[dict[str, Any]] = []
        for number, line in enumerate(lines, 1):
            try:
                doc = json.loads(line)
            except ValueError:
                doc = None
            if not isinstance(doc, dict) or not isinstance(doc.get("input"), str):
                raise fail(f"{path}: line {number} is not a record of a --from-file run; cannot resume it "
                           "(move it away or choose another -o)")
            docs.append(doc)
        if cut and docs:  # the input before the cut line may have had more lines: run it again
            last = docs[-1]["input"]
            while docs and docs[-1]["input"] == last:
                docs.pop()
        kept = [d for d in docs if not (retry_errors and "error" in d)]
        if cut or len(kept) != len(docs):
            try:
                write_atomic(path, to_jsonl(kept))
            except (InputError, OSError) as exc:
                raise fail(f"{path}: cannot rewrite: {exc}") from None
        done = Recorded({d["input"] for d in kept})
        for d in kept:
            done.errors += "error" in d
            done.gate_failures += any(not g.get("passed", True) for g in d.get("gates", ()))
        return done

    def write(self, text: str, outcomes: "Sequence[Audited | AuditFailure]") -> None:
        data = to_jsonl(records(text, outcomes))
        self.written += len(outcomes)
        if self.fd is None:
            write_stdout(data)
            return
        encoded = data.encode("utf-8")
        try:
            while encoded:  # one write for a regular file; a short write (a full disk) is finished or fails
                encoded = encoded[os.write(self.fd, encoded):]
        except OSError as exc:
            raise fail(f"{self.path}: cannot write: {exc.strerror or exc}") from None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
