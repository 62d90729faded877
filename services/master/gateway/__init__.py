"""The master's HTTP side: health, Prometheus metrics, the REST gateway, the WebUI files, the task proxy.

Module layout:

- public_server.py   the public HTTP port: uvicorn serving asgi_app in the master's process and in
                     --http-processes - 1 worker processes (http_worker.py) on the same socket.
- asgi_app.py        the ASGI app: runs the routes in threads with per-process turns (503 +
                     Retry-After), streams NDJSON and cancels a stream whose client left, hands
                     /proxy/ to the task proxy.
- http_worker.py     a worker process: REST through the gRPC port, /info, the WebUI, the task
                     proxy; what only the master knows asked over master_link.py.
- http_answers.py    what a route answers (Response, StreamingResponse, BodyError) and body bounds.
- http_request.py    what a route may ask of a request.
- master_routes.py   /info, /healthz and /metrics, from the master's state or over master_link.
- internal_service.py, master_link.py
                     the master's internal gateway service (proto/cairn/gateway/v1) and a worker's
                     client of it: proxy targets, health, metrics, opened by a per-boot key.
- task_proxy.py      /proxy/{task_id}/...: session, authorisation (proxy_targets.py), refusals, then
                     proxy_http.py (HTTP on httpx, streamed both ways), proxy_websocket.py (websockets
                     relayed message by message) or tcp_tunnel.py (a shell's TCP port over a websocket);
                     proxy_headers.py and asgi_websocket.py are what they share.
- http_limits.py     the bounds on connections and ordinary requests at once.
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
- upstream.py        the master's handlers in-process (its own process) or the gRPC channel to its
                     port (worker processes, and streams), a callable per RPC.
- json_encoding.py   messages to JSON objects as grpc-gateway prints them (EmitDefaults, camelCase,
                     enum names, int64 as strings), compiled per message type and memoized.
- errors.py          gRPC code → HTTP status, the error body, the last line of a failed stream.
- openapi.py         the OpenAPI 3.0 document, generated from the same descriptors and rules.
- proto_comments.py  the proto comments (from the generated descriptor set) for its descriptions.

deploy/envoy/ holds the same transcoding as an Envoy configuration, for deployments that want a
separate proxy.
"""
