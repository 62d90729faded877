"""An OpenAPI 3.0 document for the REST API, generated from the same descriptors and http rules
the gateway routes by, so the document and the behaviour cannot drift apart.

OpenAPI 3.0 rather than grpc-gateway's Swagger 2.0: 3.0 can say `nullable` (proto3 `optional`,
wrappers), describes request bodies and query arrays without Swagger's formData/collectionFormat
quirks, and is what current tools (schemathesis, openapi-generator, Swagger UI) read best.

Schemas follow what the gateway writes: lowerCamelCase names, enums as strings, 64-bit integers
as decimal strings, Struct as a free-form object, Timestamp as a date-time string. Streaming
methods answer newline-delimited JSON; their 200 schema is the shape of one line,
`{"result": <message>}` or, last, `{"error": <StreamError>}`.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor, ServiceDescriptor

from cairn import __version__
from services.master.gateway.errors import ERROR_HTTP_STATUSES, status_text
from services.master.gateway.http_rules import HTTP_BODY, HttpBinding
from services.master.gateway.path_template import parse_template
from services.master.gateway.proto_comments import load_comments
from services.master.gateway.request_builder import is_map, is_scalar_like
from services.master.servicers.auth import PUBLIC_METHODS

OPENAPI_VERSION = "3.0.3"
ERROR_SCHEMA = "runtimeError"
STREAM_ERROR_SCHEMA = "runtimeStreamError"
_REF = "#/components/schemas/"
# Nested request messages are offered as `a.b.c` query parameters down to this depth.
_MAX_QUERY_DEPTH = 3

_INT32 = {"type": "integer", "format": "int32", "minimum": -(2**31), "maximum": 2**31 - 1}
_UINT32 = {"type": "integer", "format": "int64", "minimum": 0, "maximum": 2**32 - 1}
_INT64 = {"type": "string", "format": "int64", "pattern": r"^-?[0-9]+$"}
_UINT64 = {"type": "string", "format": "uint64", "pattern": r"^[0-9]+$"}
_SCALARS: dict[int, dict[str, Any]] = {
    FieldDescriptor.TYPE_DOUBLE: {"type": "number", "format": "double"},
    FieldDescriptor.TYPE_FLOAT: {"type": "number", "format": "float"},
    FieldDescriptor.TYPE_INT32: _INT32,
    FieldDescriptor.TYPE_SINT32: _INT32,
    FieldDescriptor.TYPE_SFIXED32: _INT32,
    FieldDescriptor.TYPE_UINT32: _UINT32,
    FieldDescriptor.TYPE_FIXED32: _UINT32,
    FieldDescriptor.TYPE_INT64: _INT64,
    FieldDescriptor.TYPE_SINT64: _INT64,
    FieldDescriptor.TYPE_SFIXED64: _INT64,
    FieldDescriptor.TYPE_UINT64: _UINT64,
    FieldDescriptor.TYPE_FIXED64: _UINT64,
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BYTES: {"type": "string", "format": "byte"},
}
_WELL_KNOWN: dict[str, dict[str, Any]] = {
    "google.protobuf.Struct": {"type": "object", "additionalProperties": True},
    "google.protobuf.Value": {"description": "Any JSON value."},
    "google.protobuf.ListValue": {"type": "array", "items": {}},
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
    "google.protobuf.Duration": {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]+)?s$"},
    "google.protobuf.FieldMask": {"type": "string"},
    "google.protobuf.Empty": {"type": "object"},
    "google.protobuf.Any": {
        "type": "object",
        "properties": {"@type": {"type": "string"}},
        "additionalProperties": True,
    },
}
_WRAPPED: dict[str, int] = {
    "google.protobuf.DoubleValue": FieldDescriptor.TYPE_DOUBLE,
    "google.protobuf.FloatValue": FieldDescriptor.TYPE_FLOAT,
    "google.protobuf.Int64Value": FieldDescriptor.TYPE_INT64,
    "google.protobuf.UInt64Value": FieldDescriptor.TYPE_UINT64,
    "google.protobuf.Int32Value": FieldDescriptor.TYPE_INT32,
    "google.protobuf.UInt32Value": FieldDescriptor.TYPE_UINT32,
    "google.protobuf.BoolValue": FieldDescriptor.TYPE_BOOL,
    "google.protobuf.StringValue": FieldDescriptor.TYPE_STRING,
    "google.protobuf.BytesValue": FieldDescriptor.TYPE_BYTES,
}


def schema_name(full_name: str, package: str) -> str:
    """grpc-gateway's naming: the package's last part, then the nested names
    (cairn.api.v1.Experiment.State → v1ExperimentState)."""
    local = full_name[len(package) + 1 :] if package and full_name.startswith(package + ".") else full_name
    prefix = package.rsplit(".", 1)[-1] if package else ""
    return prefix + local.replace(".", "")


def path_parameter_name(variable: str) -> str:
    """A nested path variable (`metrics.trial_id`) named without dots (`metrics_trial_id`): tools
    fill OpenAPI paths with str.format-like code, which reads a dot as attribute access."""
    return variable.replace(".", "_")


def openapi_path(template: str) -> str:
    """The http rule's template as an OpenAPI path: `{var}` kept, `{var=pattern}` reduced to
    `{var}`, nested names without dots."""
    out: list[str] = []
    depth = 0
    name: list[str] = []
    for char in template:
        if char == "{":
            depth += 1
            name = []
        elif char == "}":
            depth -= 1
            out.append("{" + path_parameter_name("".join(name).partition("=")[0]) + "}")
        elif depth:
            name.append(char)
        else:
            out.append(char)
    return "".join(out)


def _with_description(schema: dict[str, Any], description: str | None) -> dict[str, Any]:
    if not description:
        return schema
    if "$ref" in schema:  # OpenAPI 3.0 ignores siblings of $ref
        return {"allOf": [schema], "description": description}
    return {**schema, "description": description}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return {"allOf": [schema], "nullable": True}
    if not schema.get("type"):
        return schema  # already any value, null included
    return {**schema, "nullable": True}


class _Schemas:
    """Component schemas, added as messages and enums are first referenced."""

    def __init__(self, comments: dict[str, str]) -> None:
        self.components: dict[str, Any] = {}
        self.comments = comments

    def ref_message(self, descriptor: Descriptor) -> dict[str, Any]:
        full_name = descriptor.full_name
        if full_name in _WELL_KNOWN:
            return dict(_WELL_KNOWN[full_name])
        if full_name in _WRAPPED:
            return _nullable(dict(_SCALARS[_WRAPPED[full_name]]))
        name = schema_name(full_name, descriptor.file.package)
        if name not in self.components:
            self.components[name] = {}  # placeholder: recursive messages refer to themselves
            self.components[name] = self._message(descriptor)
        return {"$ref": _REF + name}

    def ref_enum(self, descriptor: EnumDescriptor) -> dict[str, Any]:
        name = schema_name(descriptor.full_name, descriptor.file.package)
        if name not in self.components:
            schema: dict[str, Any] = {
                "type": "string",
                "enum": [v.name for v in descriptor.values],
                "default": descriptor.values[0].name,
            }
            self.components[name] = _with_description(schema, self.comments.get(descriptor.full_name))
        return {"$ref": _REF + name}

    def _message(self, descriptor: Descriptor) -> dict[str, Any]:
        properties = {field.json_name: self.field(field) for field in descriptor.fields}
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        return _with_description(schema, self.comments.get(descriptor.full_name))

    def element(self, field: FieldDescriptor) -> dict[str, Any]:
        """The schema of one value of `field` (an element, for repeated fields)."""
        if field.message_type is not None:
            return self.ref_message(field.message_type)
        if field.enum_type is not None:
            if field.enum_type.full_name == "google.protobuf.NullValue":
                return {"nullable": True, "enum": [None]}
            return self.ref_enum(field.enum_type)
        return dict(_SCALARS[field.type])

    def field(self, field: FieldDescriptor, describe: bool = True, body: bool = False) -> dict[str, Any]:
        """`body`: the field is a request's whole body, which is a value, never null."""
        description = self.comments.get(field.full_name) if describe else None
        if is_map(field):
            assert field.message_type is not None
            value = self.element(field.message_type.fields_by_name["value"])
            return _with_description({"type": "object", "additionalProperties": value}, description)
        if field.is_repeated:
            return _with_description({"type": "array", "items": self.element(field)}, description)
        schema = self.element(field)
        if field.has_presence and not body:
            # proto3 `optional`: absent or null means unset; a singular message prints null when
            # unset (Go's protojson with EmitUnpopulated, as Determined's gateway; json_encoding.py).
            schema = _nullable(schema)
        return _with_description(schema, description)


def _error_components() -> dict[str, Any]:
    return {
        ERROR_SCHEMA: {
            "type": "object",
            "description": (
                "An error: Determined's shape (`error.error`) and grpc-gateway's (`code`, `message`)."
            ),
            "required": ["error", "code", "message"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["code", "reason", "error"],
                    "properties": {
                        "code": {"type": "integer", "description": "The gRPC status code."},
                        "reason": {"type": "string", "description": "The code's name, e.g. NotFound."},
                        "error": {"type": "string", "description": "What went wrong."},
                    },
                },
                "code": {"type": "integer", "description": "The gRPC status code."},
                "message": {"type": "string"},
                "details": {"type": "array", "items": {"type": "object"}},
            },
        },
        STREAM_ERROR_SCHEMA: {
            "type": "object",
            "description": "The last line of a stream that failed after its first message.",
            "required": ["grpcCode", "httpCode", "message", "httpStatus"],
            "properties": {
                "grpcCode": {"type": "integer"},
                "httpCode": {"type": "integer"},
                "message": {"type": "string"},
                "httpStatus": {"type": "string"},
                "details": {"type": "array", "items": {"type": "object"}},
            },
        },
    }


def _query_parameters(
    schemas: _Schemas,
    descriptor: Descriptor,
    excluded: set[tuple[str, ...]],
    prefix: tuple[str, ...] = (),
    json_prefix: str = "",
    depth: int = 0,
) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    for field in descriptor.fields:
        path = (*prefix, field.name)
        if path in excluded:
            continue
        name = json_prefix + field.json_name
        if is_map(field):
            continue
        if is_scalar_like(field):
            schema = schemas.field(field, describe=False)  # the parameter carries the description
            param: dict[str, Any] = {"name": name, "in": "query", "required": False, "schema": schema}
            description = schemas.comments.get(field.full_name)
            if description:
                param["description"] = description
            if field.is_repeated:
                param.update(style="form", explode=True)
            params.append(param)
        elif (
            field.message_type is not None
            and not field.is_repeated
            and depth < _MAX_QUERY_DEPTH
            and field.message_type.full_name not in _WELL_KNOWN
        ):
            params.extend(
                _query_parameters(schemas, field.message_type, excluded, path, name + ".", depth + 1)
            )
    return params


def _path_parameter(schemas: _Schemas, descriptor: Descriptor, variable: str) -> dict[str, Any]:
    current = descriptor
    field: FieldDescriptor | None = None
    for part in variable.split("."):
        field = current.fields_by_name[part]
        if field.message_type is not None:
            current = field.message_type
    assert field is not None
    schema = schemas.element(field)
    if schema.get("type") == "string" and "format" not in schema:
        schema = {**schema, "minLength": 1}  # an empty segment cannot reach the route
    param: dict[str, Any] = {
        "name": path_parameter_name(variable),
        "in": "path",
        "required": True,
        "schema": schema,
    }
    description = schemas.comments.get(field.full_name)
    if description:
        param["description"] = description
    return param


def _operation(schemas: _Schemas, binding: HttpBinding, operation_id: str) -> dict[str, Any]:
    rpc = binding.rpc
    request = rpc.request_descriptor
    template = parse_template(binding.template)
    parameters = [_path_parameter(schemas, request, v) for v in template.variables]
    if binding.body != "*":
        excluded = {tuple(v.split(".")) for v in template.variables}
        if binding.body:
            excluded.add((binding.body,))
        parameters.extend(_query_parameters(schemas, request, excluded))
    operation: dict[str, Any] = {
        "operationId": operation_id,
        "tags": [request.file.name.rsplit("/", 1)[-1].removesuffix(".proto").capitalize()],
        "parameters": parameters,
    }
    description = schemas.comments.get(rpc.descriptor.full_name)
    if description:
        operation["description"] = description
    if binding.body:
        body_schema = (
            schemas.ref_message(request)
            if binding.body == "*"
            else schemas.field(request.fields_by_name[binding.body], body=True)
        )
        operation["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": body_schema}},
        }
    response_schema = schemas.ref_message(rpc.response_descriptor)
    if binding.response_body:
        response_schema = schemas.field(rpc.response_descriptor.fields_by_name[binding.response_body])
    if rpc.server_streaming:
        ok = {
            "description": "A stream: newline-delimited JSON, one object per line, sent as produced.",
            "content": {
                "application/json": {
                    "schema": {
                        "title": f"Stream result of {rpc.response_descriptor.name}",
                        "type": "object",
                        "properties": {
                            "result": response_schema,
                            "error": {"$ref": _REF + STREAM_ERROR_SCHEMA},
                        },
                    }
                }
            },
        }
    elif rpc.response_descriptor.full_name == HTTP_BODY:
        ok = {
            "description": "The answer's bytes, in the content type it names (CSV for the accounting files).",
            "content": {"*/*": {"schema": {"type": "string"}}},
        }
    else:
        ok = {
            "description": "A successful response.",
            "content": {"application/json": {"schema": response_schema}},
        }
    responses: dict[str, Any] = {"200": ok}
    for status in ERROR_HTTP_STATUSES:
        responses[str(status)] = {
            "description": status_text(status),
            "content": {"application/json": {"schema": {"$ref": _REF + ERROR_SCHEMA}}},
        }
    operation["responses"] = responses
    if rpc.full_path in PUBLIC_METHODS:
        operation["security"] = []
    return operation


def openapi_document(
    service: ServiceDescriptor, bindings: list[HttpBinding], comments: dict[str, str] | None = None
) -> dict[str, Any]:
    schemas = _Schemas(load_comments() if comments is None else comments)
    paths: dict[str, dict[str, Any]] = {}
    seen_ids: dict[str, int] = {}
    for binding in bindings:
        count = seen_ids.get(binding.rpc.name, 0)
        seen_ids[binding.rpc.name] = count + 1
        operation_id = binding.rpc.name if count == 0 else f"{binding.rpc.name}{count + 1}"
        path = openapi_path(binding.template)
        paths.setdefault(path, {})[binding.http_method.lower()] = _operation(schemas, binding, operation_id)
    components = {"schemas": {**dict(sorted(schemas.components.items())), **_error_components()}}
    components["securitySchemes"] = {
        "BearerToken": {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "A session token from POST /api/v1/auth/login, as `Authorization: Bearer <token>`."
            ),
        },
        "CookieAuth": {
            "type": "apiKey",
            "in": "cookie",
            "name": "auth",
            "description": "The session cookie that a successful login sets.",
        },
    }
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "Cairn REST API",
            "version": __version__,
            "description": (
                f"The REST face of the gRPC service {service.full_name}, transcoded by its "
                "google.api.http rules. " + schemas.comments.get(service.full_name, "")
            ).strip(),
        },
        "tags": sorted(
            (
                {"name": t}
                for t in {tag for ops in paths.values() for op in ops.values() for tag in op["tags"]}
            ),
            key=lambda t: t["name"],
        ),
        "security": [{"BearerToken": []}, {"CookieAuth": []}],
        "paths": paths,
        "components": components,
    }
