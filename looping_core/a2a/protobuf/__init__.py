"""The A2A 1.0 protobuf messages and service, for the gRPC binding (the `grpc` extra), and the
A2A 1.1 draft's, for calls answered in 1.1 (`[server] a2a_1_1_draft`).

`a2a.proto` beside this module is a copy of the official proto (package `lf.a2a.v1`);
`a2a-v1.1-draft.proto` the A2A repository's branch dev-1.1 at commit 28491879 (1.0 plus task
generations). Each `.binpb` is its proto's descriptor set with every import, compiled by protoc
(`python tests/grpc/proto_descriptor.py --write`; a test checks that regenerating changes
nothing). The draft's fields are additions, so a 1.0 message reads as a draft one and back.

The messages are built from that descriptor set in a descriptor pool of their own, not in
protobuf's process-wide default pool. The official SDK's generated modules register the same
package (`lf.a2a.v1`) in the default pool, and protobuf refuses a second copy of a package there:
generated modules of our own would make looping-core unusable in any process that also imports
the SDK (a test, a client beside an agent). A pool of our own coexists with it, and with any
SDK version, and needs only protobuf at run time (no SDK, no googleapis modules).

Nothing here is imported by the rest of core unless the gRPC binding is on.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message

__all__ = ["PACKAGE", "SERVICE_NAME", "message_class", "service"]

PACKAGE = "lf.a2a.v1"
SERVICE_NAME = f"{PACKAGE}.A2AService"
"""The service's full name: the first part of every call's path (`/lf.a2a.v1.A2AService/...`)."""


_SETS = {False: "a2a.binpb", True: "a2a-v1.1-draft.binpb"}


@functools.cache
def _pool(draft: bool) -> descriptor_pool.DescriptorPool:
    data = resources.files(__package__).joinpath(_SETS[draft]).read_bytes()
    files = descriptor_pb2.FileDescriptorSet.FromString(data)
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:  # protoc writes them dependencies first
        pool.Add(file)
    return pool


def service(*, draft: bool = False) -> ServiceDescriptor:
    """The `A2AService` descriptor: its methods, their input and output types, which stream
    (`draft`: the A2A 1.1 draft's)."""
    return _pool(draft).FindServiceByName(SERVICE_NAME)


@functools.cache
def message_class(full_name: str, *, draft: bool = False) -> type[Message]:
    """The message class of `full_name` (`lf.a2a.v1.Task`, `google.protobuf.Empty`; `draft`:
    the A2A 1.1 draft's)."""
    descriptor = _pool(draft).FindMessageTypeByName(full_name)
    cls: Any = message_factory.GetMessageClass(descriptor)
    return cls  # type: ignore[no-any-return]
