"""Regenerate the descriptor sets the gRPC binding serves from the protos beside them:

    python tests/grpc/proto_descriptor.py --write

It compiles `looping_core/a2a/protobuf/a2a.proto` (a copy of the official A2A 1.0 proto) and
`a2a-v1.1-draft.proto` (the A2A repository's branch dev-1.1, commit 28491879) with protoc from
`grpcio-tools` (the test extra), each with its imports, into `a2a.binpb` and
`a2a-v1.1-draft.binpb` next to them. Without `--write` it prints what they would hold.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parents[2] / "looping_core" / "a2a" / "protobuf"


PROTOS = ("a2a.proto", "a2a-v1.1-draft.proto")


def compiled(proto: str = "a2a.proto") -> bytes:
    """The FileDescriptorSet of `proto` and every file it imports (serialized)."""
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
                str(PROTO_DIR / proto),
            ]
        )
        if code != 0:
            raise SystemExit(f"protoc failed with exit code {code}")
        return out.read_bytes()


def main() -> None:
    from google.protobuf import descriptor_pb2  # noqa: PLC0415

    for proto in PROTOS:
        data = compiled(proto)
        target = PROTO_DIR / proto.replace(".proto", ".binpb")
        if "--write" in sys.argv[1:]:
            target.write_bytes(data)
            print(f"wrote {target} ({len(data)} bytes)")
        else:
            print(descriptor_pb2.FileDescriptorSet.FromString(data))


if __name__ == "__main__":
    main()
