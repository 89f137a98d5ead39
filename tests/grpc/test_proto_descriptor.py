"""The gRPC binding serves the official A2A proto: the shipped copy is the spec's, its
descriptor set is what protoc makes of it today, and every method it declares is a row of the
method table (and no row is missing from it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from proto_descriptor import PROTO_DIR, compiled

from looping_core.a2a.protobuf import SERVICE_NAME, message_class, service
from looping_core.server._methods import METHODS

SHARED_PROTO = Path(__file__).resolve().parents[3] / "shared" / "a2a.proto"


def _files(data: bytes) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    return {f.name: f for f in descriptor_pb2.FileDescriptorSet.FromString(data).file}


def test_regenerating_the_descriptor_set_changes_nothing() -> None:
    shipped = _files((PROTO_DIR / "a2a.binpb").read_bytes())
    fresh = _files(compiled())
    assert shipped["a2a.proto"] == fresh["a2a.proto"], (
        "a2a.binpb is stale: run python tests/grpc/proto_descriptor.py --write"
    )
    assert sorted(shipped) == sorted(fresh)


@pytest.mark.skipif(not SHARED_PROTO.exists(), reason="the shared spec digest is not here")
def test_the_shipped_proto_is_the_spec_s() -> None:
    assert (PROTO_DIR / "a2a.proto").read_text() == SHARED_PROTO.read_text()


def test_every_method_of_the_service_is_served_from_the_method_table() -> None:
    declared = {method.name for method in service().methods}
    assert declared == set(METHODS)
    streaming = {method.name for method in service().methods if method.server_streaming}
    assert streaming == {"SendStreamingMessage", "SubscribeToTask"}
    assert service().full_name == SERVICE_NAME == "lf.a2a.v1.A2AService"


def test_the_messages_live_beside_the_sdk_s_and_read_its_bytes() -> None:
    """A pool of their own: the SDK's generated classes (same package, default pool) load in
    the same process, and each side reads what the other wrote."""
    from a2a.types import a2a_pb2  # noqa: PLC0415

    ours = message_class("lf.a2a.v1.Task")(id="t-1", context_id="c-1")
    theirs = a2a_pb2.Task.FromString(ours.SerializeToString())
    assert (theirs.id, theirs.context_id) == ("t-1", "c-1")
    assert type(ours) is not a2a_pb2.Task
