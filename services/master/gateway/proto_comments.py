"""The comments written in proto/, for the descriptions of the OpenAPI document.

Generated `_pb2` modules drop source info; the descriptor set that scripts/gen_proto.py writes
(`--include_source_info`) keeps it. Without that file the document simply has no descriptions.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf import descriptor_pb2

import cairn
from services.common.logging import get_logger

log = get_logger(__name__)

DESCRIPTOR_SET = Path(cairn.__file__).resolve().parent / "gen" / "descriptor_set.binpb"

# Field numbers inside FileDescriptorProto / DescriptorProto / ServiceDescriptorProto, as used
# in SourceCodeInfo.Location.path.
_FILE_MESSAGE, _FILE_ENUM, _FILE_SERVICE = 4, 5, 6
_MESSAGE_FIELD, _MESSAGE_NESTED, _MESSAGE_ENUM = 2, 3, 4
_SERVICE_METHOD = 2


def _walk_message(
    prefix: str,
    message: descriptor_pb2.DescriptorProto,
    path: tuple[int, ...],
    out: dict[tuple[int, ...], str],
) -> None:
    name = f"{prefix}.{message.name}"
    out[path] = name
    for i, field in enumerate(message.field):
        out[(*path, _MESSAGE_FIELD, i)] = f"{name}.{field.name}"
    for i, nested in enumerate(message.nested_type):
        _walk_message(name, nested, (*path, _MESSAGE_NESTED, i), out)
    for i, enum in enumerate(message.enum_type):
        out[(*path, _MESSAGE_ENUM, i)] = f"{name}.{enum.name}"


def comments_from_file_set(file_set: descriptor_pb2.FileDescriptorSet) -> dict[str, str]:
    """Full name (of a message, field, enum, service or method) → its leading comment."""
    comments: dict[str, str] = {}
    for proto in file_set.file:
        names: dict[tuple[int, ...], str] = {}
        package = proto.package
        for i, message in enumerate(proto.message_type):
            _walk_message(package, message, (_FILE_MESSAGE, i), names)
        for i, enum in enumerate(proto.enum_type):
            names[(_FILE_ENUM, i)] = f"{package}.{enum.name}"
        for i, service in enumerate(proto.service):
            names[(_FILE_SERVICE, i)] = f"{package}.{service.name}"
            for j, method in enumerate(service.method):
                names[(_FILE_SERVICE, i, _SERVICE_METHOD, j)] = f"{package}.{service.name}.{method.name}"
        for location in proto.source_code_info.location:
            name = names.get(tuple(location.path))
            text = location.leading_comments.strip() or location.trailing_comments.strip()
            if name and text:
                comments[name] = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return comments


def load_comments(path: Path = DESCRIPTOR_SET) -> dict[str, str]:
    try:
        data = path.read_bytes()
    except OSError:
        log.info("no descriptor set; the OpenAPI document has no descriptions", path=str(path))
        return {}
    file_set = descriptor_pb2.FileDescriptorSet()
    file_set.ParseFromString(data)
    return comments_from_file_set(file_set)
