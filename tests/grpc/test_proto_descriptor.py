"""The gRPC binding serves the official A2A proto: the shipped copy is the spec's, its
descriptor set is what protoc makes of it today, and every method it declares is a row of the
method table (and no row is missing from it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from proto_descriptor import PROTO_DIR, PROTOS, compiled

from looping_core.a2a.protobuf import SERVICE_NAME, message_class, service
from looping_core.server._methods import METHODS

SHARED_PROTO = Path(__file__).resolve().parents[3] / "shared" / "a2a.proto"


def _files(data: bytes) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    return {f.name: f for f in descriptor_pb2.FileDescriptorSet.FromString(data).file}


@pytest.mark.parametrize("proto", PROTOS)
def test_regenerating_the_descriptor_sets_changes_nothing(proto: str) -> None:
    shipped = _files((PROTO_DIR / proto.replace(".proto", ".binpb")).read_bytes())
    fresh = _files(compiled(proto))
    assert shipped[proto] == fresh[proto], (
        f"the descriptor set of {proto} is stale: run python tests/grpc/proto_descriptor.py --write"
    )
    assert sorted(shipped) == sorted(fresh)


def test_the_draft_adds_only_the_generation_fields_to_1_0() -> None:
    """The 1.1 draft's messages are 1.0's plus five fields, so either reads the other."""

    def fields(proto: str) -> set[tuple[str, str, int]]:
        data = (PROTO_DIR / proto.replace(".proto", ".binpb")).read_bytes()
        file = _files(data)[proto]
        return {(m.name, f.name, f.number) for m in file.message_type for f in m.field}

    added = fields("a2a-v1.1-draft.proto") - fields("a2a.proto")
    assert added == {
        ("Task", "generation", 7),
        ("TaskStatusUpdateEvent", "generation", 5),
        ("TaskArtifactUpdateEvent", "generation", 7),
        ("GetTaskRequest", "current_generation", 4),
        ("SendMessageConfiguration", "if_generation_match", 5),
    }
    assert fields("a2a.proto") <= fields("a2a-v1.1-draft.proto")
    assert service(draft=True).full_name == service().full_name


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
