"""A coverage-guided fuzzer (atheris, libFuzzer) for every decoder a stored object meets:
frames of each codec, object kinds, commit payloads, node layouts, inline values and
the state builder. Only snapvc's own errors may come out; anything else is a finding.

    python tests/fuzz_decoders.py -runs=100000 -max_len=2048    # or any libFuzzer flags

``tests/test_hostile.py`` runs it briefly when atheris is installed.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from snapvc.encoding.nodes import decode_node
    from snapvc.encoding.reader import Loader, ObjectCache
    from snapvc.errors import SnapvcError
    from snapvc.ids import ObjectId
    from snapvc.maintenance.graph import read_children
    from snapvc.objects import COMMIT, Commit, split_object
    from snapvc.store.codec import decode_frame

OID = ObjectId(b"\x01" * 32)
BASE = b"\x02" + b"a base object's canonical bytes " * 8


def one_input(data: bytes) -> None:
    if not data:
        return
    try:
        frame = decode_frame(OID, data, BASE, None)
    except SnapvcError:
        frame = data
    except ValueError as exc:  # a dictionary frame, whose dictionary this harness does not give
        if "needs its" not in str(exc):
            raise
        frame = data
    try:
        kind, payload = split_object(OID, frame)
        if kind == COMMIT:
            Commit.decode(OID, payload)
            return
        read_children(OID, frame)
        decode_node(OID, frame)
        store = {OID: frame}
        Loader(lambda ids: {i: store[i] for i in ids if i in store}, ObjectCache(1 << 20)).materialize(OID)
    except SnapvcError:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
