"""The zero-trust A2A 1.0 edge.

- `keys`: the agent's Ed25519 signing key and JWKS;
- `card`: the signed stub card, tenants' cards, `verify_card`;
- `gateway_token`: `verify_gateway_token` (four checks in a fixed order, then the claims);
- `jwks`: fetching gateways' key sets without amplification;
- `models` + `protojson`: the wire models and their ProtoJSON converter;
- `jsonrpc` + `errors`: the method table and the error table;
- `edge` + `methods`: the HTTP handlers and the A2A methods they dispatch to.
"""

__all__: list[str] = []
