"""Regenerate the descriptor set the gRPC binding serves from the proto beside it:

    python tests/grpc/proto_descriptor.py --write

It compiles `looping_core/a2a/protobuf/a2a.proto` (a copy of the official A2A 1.0 proto) with
protoc from `grpcio-tools` (the test extra), with its imports, into `a2a.binpb` next to it.
Without `--write` it prints what the file would hold, in text form.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parents[2] / "looping_core" / "a2a" / "protobuf"


def compiled() -> bytes:
    """The FileDescriptorSet of `a2a.proto` and every file it imports (serialized)."""
    import google.api  # noqa: PLC0415 - googleapis-common-protos ships the .proto files
    import grpc_tools  # noqa: PLC0415
    from grpc_tools import protoc  # noqa: PLC0415

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    googleapis = Path(next(iter(google.api.__path__))).parents[1]
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "a2a.binpb"
        code = protoc.main(
            [
                "protoc",
                f"-I{PROTO_DIR}",
                f"-I{googleapis}",
                f"-I{well_known}",
                f"--descriptor_set_out={out}",
                "--include_imports",
                str(PROTO_DIR / "a2a.proto"),
            ]
        )
        if code != 0:
            raise SystemExit(f"protoc failed with exit code {code}")
        return out.read_bytes()


def main() -> None:
    data = compiled()
    if "--write" in sys.argv[1:]:
        (PROTO_DIR / "a2a.binpb").write_bytes(data)
        print(f"wrote {PROTO_DIR / 'a2a.binpb'} ({len(data)} bytes)")
        return
    from google.protobuf import descriptor_pb2  # noqa: PLC0415

    print(descriptor_pb2.FileDescriptorSet.FromString(data))


if __name__ == "__main__":
    main()
