"""The gRPC metadata keys of Cairn's wire: the contract between the clients (CLI, Core API, agents)
that send them and the services that read them (services/common/metadata.py), written once here."""

from __future__ import annotations

# A user's session token, sent as "Bearer TOKEN". `authorization` is what Cairn's clients send;
# `x-user-token` is Determined's native gRPC key and `grpcgateway-authorization` what a
# grpc-gateway forwards: the services accept all three.
USER_TOKEN_KEY = "authorization"
USER_TOKEN_KEYS = (USER_TOKEN_KEY, "x-user-token", "grpcgateway-authorization")
# An allocation's token, held by trial code (Determined: `x-allocation-token`).
ALLOCATION_TOKEN_KEY = "x-allocation-token"
# The shared secret that internal services and agents present to each other.
CLUSTER_TOKEN_KEY = "x-cairn-cluster-token"
# An agent's own credential (issued when it enrolled; services/master/domain/identity/
# agent_credentials.py): it speaks as the agent id the credential was issued to, and no other.
AGENT_CREDENTIAL_KEY = "x-cairn-agent-credential"
# The per-boot key a master hands the worker processes of its HTTP port, which opens its internal
# gateway service (proto/cairn/gateway/v1/gateway.proto) and nothing else.
GATEWAY_KEY_KEY = "x-cairn-gateway-key"
# Trailing metadata on an UNAVAILABLE answer whose change may have been stored (the database
# connection was lost while it committed): a client must not send a non-idempotent call again.
COMMIT_UNKNOWN_KEY = "x-cairn-commit-unknown"
