#!/usr/bin/env python3
"""A time-boxed differential fuzzer of the compiled NodeProto decoder (mhainspect/loaders/_nodewire.c).

    python scripts/fuzz_nodewire.py --seconds 600 [--module-dir DIR] [--seed N] [--crashes DIR]
    python scripts/fuzz_nodewire.py --leaks [--calls 100000] [--module-dir DIR]
    python scripts/fuzz_nodewire.py --out-of-memory [--module-dir DIR]
    python scripts/fuzz_nodewire.py --atheris [--module-dir DIR] [libFuzzer flags...]

``--module-dir`` imports ``_nodewire`` from that folder instead of the package: a sanitizer build,
e.g. ``gcc -O1 -g -fsanitize=address,undefined -shared -fPIC -I<python include> _nodewire.c -o
DIR/_nodewire<EXT_SUFFIX>``, run with ``LD_PRELOAD=$(gcc -print-file-name=libasan.so)
ASAN_OPTIONS=detect_leaks=0``.

The contract, checked on every input (the decoder's header comment): ``decode_nodes`` either
returns, and then protobuf parses each blob as a NodeProto (attributes as bytes) to exactly the
same fields, every string an exact ``str``; or it raises ValueError (UnicodeDecodeError is one).
Any other exception or a crash is a failure. Inputs are serialized nodes of the sample models and
of a structure-aware generator (field numbers around NodeProto's, every wire type, overlong and
truncated varints, UTF-8 edge cases, metadata entries), mutated bytewise and by field splicing;
each is decoded alone and in batches of several.

``--leaks`` runs decode_nodes over a fixed set of inputs that takes every path (success, each
error, the iterator's error, non-bytes items, more distinct op types than the symbol table
keeps) and reports reference-count growth (debug builds: ``sys.gettotalrefcount``), traced
Python memory and RSS; exits 1 when they grow. ``--out-of-memory`` runs the same inputs with each
allocation failing in turn (``_testcapi.set_nomemory``): MemoryError, never a crash.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib.util
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

Decode = Callable[[Any], list[Any]]


def load_decoder(module_dir: str | None) -> Decode:
    if module_dir is None:
        from mhainspect.loaders import onnx_wire

        decode = onnx_wire.node_decoder()
        if decode is None:
            sys.exit("mhainspect.loaders._nodewire is not built")
        return decode
    found = sorted(Path(module_dir).glob("_nodewire*.so")) + sorted(Path(module_dir).glob("_nodewire*.pyd"))
    if not found:
        sys.exit(f"no _nodewire extension in {module_dir}")
    spec = importlib.util.spec_from_file_location("_nodewire", found[0])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print(f"decoder: {found[0]}")
    return module.decode_nodes  # type: ignore[no-any-return]


def reference_parser() -> Callable[[bytes], tuple[Any, ...]]:
    """protobuf's reading of a blob as NodeFields (NodeProto with attribute as bytes)."""
    from mhainspect.loaders import onnx_wire
    from mhainspect.loaders.onnx_loader import node_fields

    node_cls = onnx_wire._message_class(
        onnx_wire._bytes_fields_descriptor(onnx_wire._onnx_file_descriptor(), onnx_wire.RAW_ATTRIBUTES),
        "onnx.NodeProto")

    def parse(blob: bytes) -> tuple[Any, ...]:
        node = node_cls()
        node.ParseFromString(blob)
        op_type, domain, name, inputs, outputs, attributes, metadata = node_fields(node)
        return op_type, domain, name, tuple(inputs), tuple(outputs), tuple(attributes), metadata

    return parse


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------

TEXTS = [b"", b"x", b"Add", b"MatMul", b"com.microsoft", b"a\x00b", "é".encode(), "☃".encode(), "😀".encode(),
         b"\xed\xa0\x80", b"\xed\x9f\xbf", b"\xee\x80\x80", b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xc0\xaf",
         b"\xe0\x80\xaf", b"\xff", b"\x80", b"\xc3", b"\xef\xbf\xbe", b"\x7f", b"onnx::MatMul_123",
         b"pkg.torch.onnx.name_scopes", b"['', 'model.layers.0']", b"/model/layers.0/self_attn/MatMul"]


def varint(value: int, size: int = 0) -> bytes:
    """value as a varint, padded to size bytes when size is larger than its shortest form."""
    out = bytearray()
    while True:
        out.append(value & 0x7F)
        value >>= 7
        if not value and len(out) >= size:
            break
    for i in range(len(out) - 1):
        out[i] |= 0x80
    return bytes(out)


class Generator:
    def __init__(self, rng: random.Random, samples: list[bytes]) -> None:
        self.rng = rng
        self.samples = samples

    def number(self) -> int:
        r = self.rng.random()
        if r < 0.75:
            return self.rng.randint(1, 11)
        if r < 0.85:
            return self.rng.choice((0, 15, 16, 19000, 2**29 - 1, 2**29, 2**32 >> 3))
        return self.rng.randint(1, 2**29 - 1)

    def size(self) -> int:
        return 0 if self.rng.random() < 0.85 else self.rng.randint(1, 11)

    def text(self) -> bytes:
        if self.rng.random() < 0.7:
            return self.rng.choice(TEXTS)
        return bytes(self.rng.randrange(256) if self.rng.random() < 0.2 else self.rng.randrange(32, 127)
                     for _ in range(self.rng.randint(0, 20)))

    def field(self, number: int, depth: int) -> bytes:
        rng = self.rng
        wire = 2 if rng.random() < 0.8 else rng.choice((0, 1, 3, 4, 5, 6, 7))
        tag = varint(number << 3 | wire, self.size())
        if wire == 0:
            return tag + varint(rng.choice((0, 1, 127, 128, 2**63, 2**64 - 1, rng.getrandbits(64))), self.size())
        if wire == 1:
            return tag + bytes(rng.randrange(256) for _ in range(8))
        if wire == 5:
            return tag + bytes(rng.randrange(256) for _ in range(4))
        if wire == 3:  # a group, maybe closed
            body = b"".join(self.field(self.number(), depth + 1) for _ in range(rng.randint(0, 2))) if depth < 3 else b""
            return tag + body + (varint(number << 3 | 4) if rng.random() < 0.8 else b"")
        if wire in (4, 6, 7):
            return tag
        if number in (5, 9, 10) and depth < 3 and rng.random() < 0.7:
            payload = self.entry(depth + 1) if number == 9 else self.message(depth + 1)
        elif number == 5 and self.samples and rng.random() < 0.3:
            payload = rng.choice(self.samples)  # a node where an attribute goes: framing, not meaning
        else:
            payload = self.text()
        return tag + varint(len(payload), self.size()) + payload

    def entry(self, depth: int) -> bytes:
        fields = [self.field(self.rng.choice((1, 2, 1, 2, 3)), depth) for _ in range(self.rng.randint(0, 3))]
        return b"".join(fields)

    def message(self, depth: int) -> bytes:
        return b"".join(self.field(self.number(), depth) for _ in range(self.rng.randint(0, 8)))


def mutate(rng: random.Random, blob: bytes, pool: list[bytes]) -> bytes:
    data = bytearray(blob)
    for _ in range(rng.randint(1, 4)):
        how = rng.randrange(9)
        i = rng.randint(0, len(data))
        if how == 0 and data:
            data[min(i, len(data) - 1)] = rng.randrange(256)
        elif how == 1:
            data[i:i] = bytes([rng.choice((0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, 0x0A, 0x22, 0x4A, 0x52, rng.randrange(256)))])
        elif how == 2 and data:
            del data[i:i + rng.randint(1, 8)]
        elif how == 3:
            del data[i:]
        elif how == 4 and data:
            j = rng.randint(0, len(data))
            data[i:i] = data[min(i, j):max(i, j)][:64]
        elif how == 5 and pool:
            other = rng.choice(pool)
            j = rng.randint(0, len(other))
            data[i:] = other[j:]
        elif how == 6 and data:  # bump a byte by one: lengths off by one
            k = min(i, len(data) - 1)
            data[k] = (data[k] + rng.choice((1, -1))) & 0xFF
        elif how == 7 and data:  # set or clear a continuation bit
            k = min(i, len(data) - 1)
            data[k] ^= 0x80
        elif how == 8 and pool:
            data += rng.choice(pool)
    return bytes(data)


def sample_nodes() -> list[bytes]:
    import onnx

    out = []
    for path in sorted((REPO_ROOT / "sample_models").glob("*.onnx")):
        out.extend(n.SerializeToString() for n in onnx.load(str(path), load_external_data=False).graph.node)
    return out


# ---------------------------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------------------------


class Failure(Exception):
    pass


def checker(decode: Decode) -> Callable[[list[bytes]], str]:
    from google.protobuf.message import DecodeError

    parse = reference_parser()

    def is_text(value: Any) -> bool:
        return type(value) is str

    def check(blobs: list[bytes]) -> str:
        try:
            got = decode(blobs)
        except ValueError:
            return "ValueError"
        except Exception as exc:  # noqa: BLE001
            raise Failure(f"{type(exc).__name__}: {exc}") from exc
        expected = []
        for blob in blobs:
            try:
                expected.append(parse(blob))
            except DecodeError as exc:
                raise Failure(f"returned on bytes protobuf rejects: {blob!r}") from exc
        if got != expected:
            raise Failure(f"differs from protobuf: {got!r} != {expected!r}")
        for op_type, domain, name, inputs, outputs, attributes, metadata in got:
            strings = [op_type, domain, name, *inputs, *outputs, *(s for pair in metadata for s in pair)]
            if not all(map(is_text, strings)) or not all(type(a) is bytes for a in attributes):
                raise Failure(f"not str/bytes: {got!r}")
        return "ok"

    return check


def fuzz(decode: Decode, seconds: float, seed: int, crashes: Path | None) -> int:
    rng = random.Random(seed)
    samples = sample_nodes()
    gen = Generator(rng, samples)
    pool = samples + [gen.message(0) for _ in range(200)]
    check = checker(decode)
    counts: dict[str, int] = {}
    failures: dict[str, bytes] = {}
    start = time.monotonic()
    ran = 0
    while time.monotonic() - start < seconds:
        for _ in range(200):
            r = rng.random()
            if r < 0.3:
                blob = gen.message(0)
            elif r < 0.5:
                blob = mutate(rng, rng.choice(samples), pool)
            else:
                blob = mutate(rng, rng.choice(pool), pool)
            if len(pool) < 5000 and rng.random() < 0.05:
                pool.append(blob)
            batch = [blob] if rng.random() < 0.8 else [blob, *rng.sample(pool, rng.randint(1, 4))]
            try:
                outcome = check(batch)
            except Failure as exc:
                key = str(exc)[:80]
                if key not in failures:
                    failures[key] = blob
                    print(f"FAIL {exc}"[:400], flush=True)
                    if crashes is not None:
                        crashes.mkdir(parents=True, exist_ok=True)
                        (crashes / hashlib.sha1(blob).hexdigest()).write_bytes(blob)
                outcome = "FAIL"
            counts[outcome] = counts.get(outcome, 0) + 1
            ran += 1
    print(f"{ran} inputs in {time.monotonic() - start:.0f} s (seed {seed}): {counts}; {len(failures)} distinct failures")
    return 1 if failures else 0


def run_atheris(module_dir: str | None, argv: list[str]) -> None:
    # The decoder's own coverage needs a sancov build and libFuzzer preloaded (module docstring).
    import atheris

    check: Callable[[list[bytes]], str] | None = None

    def one(data: bytes) -> None:
        # The first byte splits the input into a batch of up to 4 blobs.
        assert check is not None
        if not data:
            check([])
            return
        parts = data[1:].split(b"\xfe\xfe\xfe", data[0] % 4) if data[0] & 0x80 else [data[1:]]
        check(parts)

    def one_checked(data: bytes) -> None:
        assert check is not None
        one(data)

    check = checker(load_decoder(module_dir))
    atheris.Setup([sys.argv[0], *argv], one_checked)
    atheris.Fuzz()


# ---------------------------------------------------------------------------------------------
# Leaks
# ---------------------------------------------------------------------------------------------


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def node(op_type: str, inputs: list[str], outputs: list[str], name: str = "", domain: str = "",
         attributes: tuple[bytes, ...] = (), metadata: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A serialized NodeProto, by hand (the leak check runs on debug builds without onnx)."""
    parts = [field(1, i.encode()) for i in inputs] + [field(2, o.encode()) for o in outputs]
    parts += [field(3, name.encode()), field(4, op_type.encode()), *(field(5, a) for a in attributes),
              field(7, domain.encode()), field(6, b"doc"), b"\x58\x01"]
    parts += [field(9, field(1, k.encode()) + field(2, v.encode())) for k, v in metadata]
    return b"".join(parts)


def leak_inputs() -> list[Any]:
    good = [node(op, [f"x{i}", "w"], [f"y{i}"], name=f"/model/layers.{i}/{op}", domain=d,
                 attributes=(b"\x0a\x04axis\x18\x01\xa0\x01\x02",) * (i % 3),
                 metadata=(("pkg.torch.onnx.name_scopes", "['', 'layers.0']"),) * (i % 2))
            for i, (op, d) in enumerate([("MatMul", ""), ("Add", ""), ("Softmax", "ai.onnx"),
                                         ("Attention", "com.microsoft"), ("Relu", ""), ("Gemm", "")] * 3)]
    good.append(node("Ünïcode", ["é"], ["☃"], name="😀", domain="dömain"))
    many_ops = [varint(4 << 3 | 2) + varint(len(t)) + t for t in (f"Op{i}".encode() for i in range(400))]
    many_ops += [b"\x22\x04\xc3\xa9op", b"\x3a\x02\xc3\xa9"]  # non-ASCII op type and domain: never kept
    bad = [b"\x0a\x05ab", b"\x0a\x02\xff\xfe", b"\x22\x02\xff\xfe", b"\x3a\x01\xff", b"\x1a\x01\xff", b"\x00\x01",
           b"\x7b\x7c", b"\x52\x00", b"\x78" + b"\xff" * 10, b"\x4a\x03\x0a\x01\xff", b"\x4a\x03\x12\x01\xff",
           b"\x4a\x02\x0a\x05", b"\xa2\x80\x80\x80\x80\x00\x03Add", b"\x22\x83\x80\x80\x80\x80\x00Add"]

    def failing() -> Iterator[bytes]:
        yield good[0]
        raise RuntimeError("boom")

    cases: list[Any] = [good, many_ops, [], *([good[0], b, good[1]] for b in bad),
                        [good[0], bytearray(good[1])], [good[0], memoryview(good[1])], [good[0], "str"], [None],
                        failing, 5]
    return cases


def leaks(decode: Decode, calls: int) -> int:
    import resource
    import tracemalloc

    cases = leak_inputs()

    def run(n: int) -> None:
        for i in range(n):
            case = cases[i % len(cases)]
            try:
                decode(case() if callable(case) else case)
            except (ValueError, RuntimeError, TypeError):
                pass

    run(len(cases) * 50)  # warm up: interned strings, caches, free lists
    total = getattr(sys, "gettotalrefcount", None)
    tracemalloc.start()

    def measure() -> tuple[int, int, int | None]:
        gc.collect()
        return (tracemalloc.get_traced_memory()[0], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                total() if total else None)

    # Two equal rounds: what the first one leaves (tracemalloc's own tables, a resized dict) is
    # paid once; a leak grows again in the second.
    t0 = time.monotonic()
    before = measure()
    run(calls // 2)
    middle = measure()
    snapshot = tracemalloc.take_snapshot()
    run(calls // 2)
    after = measure()
    growth = [s for s in tracemalloc.take_snapshot().compare_to(snapshot, "lineno") if s.size_diff > 0][:5]
    tracemalloc.stop()
    print(f"{calls} calls over {len(cases)} cases in {time.monotonic() - t0:.0f} s; (traced bytes, max RSS KiB, "
          f"total refcount) before, after one half, after both: {before} {middle} {after}")
    for stat in growth:
        print("  ", stat)
    leaked = after[0] - middle[0] > 16 << 10 or (total is not None and after[2] - middle[2] > 100)  # type: ignore[operator]
    print("LEAK" if leaked else "no growth in the second half")
    return 1 if leaked else 0


def out_of_memory(decode: Decode) -> int:
    """decode_nodes with the n-th allocation failing, for every n up to where a call needs none more:
    MemoryError, nothing else (and no crash, no leak: run it on a sanitizer or debug build)."""
    import _testcapi  # type: ignore[import-not-found]

    cases = leak_inputs()
    total = getattr(sys, "gettotalrefcount", None)
    failed = tried = 0
    refs = []
    for _round in range(2):  # the second round must leave the reference total where the first did
        for case in cases:
            make = (lambda case=case: case()) if callable(case) else (lambda case=case: case)
            since_last = 0  # calls in a row that no failed allocation reached: past the last one
            n = 0
            while since_last < 50:
                blobs = make()
                outcome = "ok"
                try:
                    _testcapi.set_nomemory(n, n + 1)  # the n-th allocation from here fails, only that one
                    try:
                        decode(blobs)
                    finally:
                        _testcapi.remove_mem_hooks()  # before anything else allocates
                except MemoryError:
                    outcome = "MemoryError"
                except (ValueError, RuntimeError, TypeError) as exc:
                    outcome = type(exc).__name__
                except BaseException as exc:  # noqa: BLE001
                    outcome = f"unexpected {type(exc).__name__}"
                del blobs
                if outcome.startswith("unexpected"):
                    failed += 1
                    print(outcome, "at allocation", n)
                since_last = 0 if outcome == "MemoryError" else since_last + 1
                n += 1
            tried += n
        gc.collect()
        refs.append(total() if total else None)
    grew = refs[0] is not None and refs[1] - refs[0] > 100  # type: ignore[operator]
    print(f"every allocation failed in turn, twice over {len(cases)} cases ({tried} calls); {failed} unexpected"
          f" outcomes; total refcount after each round: {refs}{' LEAK' if grew else ''}")
    return 1 if failed or grew else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--module-dir")
    parser.add_argument("--crashes", type=Path)
    parser.add_argument("--leaks", action="store_true")
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--atheris", action="store_true")
    parser.add_argument("--out-of-memory", action="store_true")
    args, rest = parser.parse_known_args()
    if args.atheris:
        run_atheris(args.module_dir, rest)
        return
    decode = load_decoder(args.module_dir)
    if args.out_of_memory:
        sys.exit(out_of_memory(decode))
    elif args.leaks:
        sys.exit(leaks(decode, args.calls))
    else:
        seed = args.seed if args.seed is not None else random.randrange(2**32)
        sys.exit(fuzz(decode, args.seconds, seed, args.crashes))


if __name__ == "__main__":
    main()
