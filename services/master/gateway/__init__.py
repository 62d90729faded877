"""The master's HTTP side: health, Prometheus metrics, the REST gateway (and later the WebUI files).

Module layout:

- http_server.py     the ThreadingHTTPServer (HTTP/1.1 keep-alive, request bodies, chunked
                     streaming answers that stop their producer when the client leaves), the
                     route list, /healthz and /metrics.
- prometheus.py      cluster gauges for /metrics.
- rest_gateway.py    the REST API under /api/: routes a request, builds the gRPC request, calls the
                     master's own gRPC port, answers JSON (unary) or NDJSON (server streams), sets
                     and clears the session cookie on Login/Logout, serves the OpenAPI document.
                     `rest_routes(...)` is what app.py registers.
- http_rules.py      the `google.api.http` rules of a service, read from its compiled descriptors.
- path_template.py   path templates (`/trials/{trial_id}`, `{metrics.trial_id}`, `*`, `**`).
- router.py          most-specific-first matching of method + path to a binding; 404 / 405.
- request_builder.py path variables, query string and JSON body into the request message, with
                     grpc-gateway v1's rules; malformed input → 400 naming the field.
- credentials.py     Authorization / `auth` cookie / Grpc-Metadata-* headers into gRPC metadata;
                     the session cookie's Set-Cookie values.
- upstream.py        the gRPC channel to the master's own port and a callable per RPC.
- json_encoding.py   messages to JSON objects as grpc-gateway prints them (EmitDefaults, camelCase,
                     enum names, int64 as strings), compiled per message type and memoized.
- errors.py          gRPC code → HTTP status, the error body, the last line of a failed stream.
- openapi.py         the OpenAPI 3.0 document, generated from the same descriptors and rules.
- proto_comments.py  the proto comments (from the generated descriptor set) for its descriptions.

deploy/envoy/ holds the same transcoding as an Envoy configuration, for deployments that want a
separate proxy.
"""
