"""Setting the gRPC binding up: its config keys checked (each problem naming its key), its
packages and TLS files checked before anything listens, a port in use reported by `looping
check` with the other problems, and TLS served when configured."""

from __future__ import annotations

import datetime
import importlib.util
import ipaddress
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from looping_core.config import parse_config
from looping_core.errors import ConfigError
from looping_core.server._listening import grpc_problems
from looping_core.testing import FakeGateway, config_toml, tenant_toml

from support.bindings import grpc_request
from support.ports import unused_port
from support.serving import start_agent

KEY_ENV = "LPT_GRPC_SETUP_KEY"


def _config(server: str, port: int = 8080) -> str:
    return config_toml(
        port=port,
        gateway_origins=["http://127.0.0.1:9000"],
        signing_key_env=KEY_ENV,
        store_url="sqlite:///unused.db",
        server=server,
        extra=tenant_toml("words", "looping_plugins_example.agent:WordCountAgent"),
    )


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        ("grpc_port = 8080", "grpc_port must differ from port (8080): gRPC has its own listener"),
        ("grpc_port = 70000", "grpc_port must be between 1 and 65535, or 0 for no gRPC"),
        ('grpc_port = 50051\ngrpc_address = "https://x/y"', "grpc_address must be host:port"),
        ('grpc_port = 50051\ngrpc_tls_certificate = "c.pem"', "@ $.server.grpc_tls_private_key"),
        ('grpc_port = 50051\ngrpc_tls_private_key = "k.pem"', "@ $.server.grpc_tls_certificate"),
    ],
)
def test_a_grpc_key_with_a_problem_is_named(server: str, problem: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(_config(server))
    assert any(problem in line for line in refused.value.problems), refused.value.problems


def test_the_grpc_address_defaults_to_the_public_host_and_the_grpc_port() -> None:
    config = parse_config(_config('grpc_port = 50051\npublic_url = "https://agent.example/x"'))
    assert config.server.grpc_url == "agent.example:50051"
    ipv6 = parse_config(_config('grpc_port = 50051\npublic_url = "http://[::1]:8080"'))
    assert ipv6.server.grpc_url == "[::1]:50051"
    assert config.server.grpc_listen_address == "127.0.0.1:50051"
    given = parse_config(_config('grpc_port = 50051\ngrpc_address = "grpc.example:443"'))
    assert given.server.grpc_url == "grpc.example:443"


def test_without_grpcio_startup_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real: Callable[..., Any] = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "grpc" else real(name, *a)
    )
    problems = grpc_problems(parse_config(_config("grpc_port = 50051")))
    assert problems == [
        "grpc_port needs grpcio; install the grpc extra: pip install 'looping-core[grpc]' "
        "@ $.server.grpc_port"
    ]
    assert grpc_problems(parse_config(_config(""))) == []  # off: nothing needed


def test_unreadable_or_non_pem_tls_files_are_named(tmp_path: Path) -> None:
    (tmp_path / "key.pem").write_text("not a key")
    server = (
        f'grpc_port = 50051\ngrpc_tls_certificate = "{tmp_path / "missing.pem"}"\n'
        f'grpc_tls_private_key = "{tmp_path / "key.pem"}"'
    )
    problems = grpc_problems(parse_config(_config(server)))
    assert [p.rsplit("@ ", 1)[1] for p in problems] == [
        "$.server.grpc_tls_certificate",
        "$.server.grpc_tls_private_key",
    ]
    assert "cannot read" in problems[0]
    assert "is not a PEM file" in problems[1]


def test_check_reports_a_grpc_port_in_use_with_the_other_problems(
    looping_cli: Callable[..., Any], tmp_path: Path
) -> None:
    holder = socket.create_server(("127.0.0.1", 0))
    taken = holder.getsockname()[1]
    try:
        path = tmp_path / "looping.toml"
        path.write_text(_config(f"grpc_port = {taken}", port=unused_port()))
        result = looping_cli("check", "--config", str(path), env={})  # no signing key either
    finally:
        holder.close()
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{taken}" in result.stderr
    assert "@ $.server.grpc_port" in result.stderr
    assert "@ $.security.signing_key" in result.stderr  # with the other problems


def _self_signed(folder: Path) -> tuple[Path, Path, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    chain = certificate.public_bytes(serialization.Encoding.PEM)
    (folder / "cert.pem").write_bytes(chain)
    (folder / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return folder / "cert.pem", folder / "key.pem", chain


async def test_grpc_over_tls_when_a_certificate_is_configured(
    gateway: FakeGateway, tmp_path: Path
) -> None:
    certificate, key, chain = _self_signed(tmp_path)
    server = f'grpc_tls_certificate = "{certificate}"\ngrpc_tls_private_key = "{key}"'
    agent, listener = await start_agent([gateway.origin], grpc=True, server=server)
    try:
        address = agent.config.server.grpc_url
        token = gateway.token(tenant="alice", aud=address)
        metadata = (("authorization", f"Bearer {token}"), ("a2a-version", "1.0"))
        request = grpc_request("GetExtendedAgentCard", {"tenant": "alice"}).SerializeToString()
        credentials = grpc.ssl_channel_credentials(root_certificates=chain)
        async with grpc.aio.secure_channel(address, credentials) as channel:
            card = await channel.unary_unary("/lf.a2a.v1.A2AService/GetExtendedAgentCard")(
                request, metadata=metadata
            )
        assert b"Alice" in card
        async with grpc.aio.insecure_channel(address) as channel:  # plain HTTP/2: no answer
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await channel.unary_unary("/lf.a2a.v1.A2AService/GetExtendedAgentCard")(
                    request, metadata=metadata, timeout=5
                )
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await agent.session.close()
        await listener.cleanup()
