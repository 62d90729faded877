"""Unpacking model definitions: plain files, folders and inward links only."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from services.agent.runtime.context_archive import UnsafeArchiveError, unpack_context


def member(
    name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", link: str = ""
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    info.linkname = link
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info, data


def archive(tmp_path: Path, *members: tuple[tarfile.TarInfo, bytes]) -> Path:
    path = tmp_path / "context.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    folder = tmp_path / "container"
    folder.mkdir()
    return folder


def test_a_safe_archive_unpacks_with_inward_links(tmp_path: Path, dest: Path) -> None:
    path = archive(
        tmp_path,
        member("./model", tarfile.DIRTYPE),
        member("model/train.py", data=b"print('hi')\n"),
        member("model/link.py", tarfile.SYMTYPE, link="train.py"),
        member("up.py", tarfile.SYMTYPE, link="model/../model/train.py"),
        member("hard.py", tarfile.LNKTYPE, link="model/train.py"),
    )
    assert unpack_context(path, dest) == 5
    assert (dest / "model" / "train.py").read_text() == "print('hi')\n"
    assert (dest / "model" / "link.py").read_text() == "print('hi')\n"
    assert (dest / "up.py").read_text() == "print('hi')\n"
    assert (dest / "hard.py").read_text() == "print('hi')\n"


@pytest.mark.parametrize(
    ("members", "reason"),
    [
        ([member("/etc/evil", data=b"x")], "absolute"),
        ([member("../evil", data=b"x")], "'..'"),
        ([member("model/../../evil", data=b"x")], "'..'"),
        ([member("escape", tarfile.SYMTYPE, link="/etc")], "absolute"),
        ([member("escape", tarfile.SYMTYPE, link="../outside")], "outside"),
        ([member("model/escape", tarfile.SYMTYPE, link="../../outside")], "outside"),
        ([member("hard", tarfile.LNKTYPE, link="../outside")], "outside"),
        ([member("hard", tarfile.LNKTYPE, link="/etc/passwd")], "absolute"),
        ([member("dev", tarfile.CHRTYPE)], "device"),
        ([member("blk", tarfile.BLKTYPE)], "device"),
        ([member("pipe", tarfile.FIFOTYPE)], "FIFO"),
        ([member(".cairn-agent/state.json", data=b"{}")], "reserved"),
        # Each link points inside on its own; together they lead out: caught on disk.
        (
            [member("a", tarfile.SYMTYPE, link="."), member("b", tarfile.SYMTYPE, link="a/..")],
            "outside",
        ),
        (
            [
                member("sub", tarfile.DIRTYPE),
                member("sub/up", tarfile.SYMTYPE, link=".."),
                member("sub/up/x", data=b"ok"),
            ],
            None,
        ),
    ],
)
def test_unsafe_members_are_refused(
    tmp_path: Path, dest: Path, members: list[tuple[tarfile.TarInfo, bytes]], reason: str | None
) -> None:
    path = archive(tmp_path, *members)
    if reason is None:
        # Writing through an inward link stays inside: allowed.
        unpack_context(path, dest)
        assert (dest / "x").read_bytes() == b"ok"
        return
    with pytest.raises(UnsafeArchiveError, match=reason):
        unpack_context(path, dest)
    assert not (tmp_path / "evil").exists() and not (tmp_path / "outside").exists()


def test_garbage_is_not_an_archive(tmp_path: Path, dest: Path) -> None:
    path = tmp_path / "junk.tar.gz"
    path.write_bytes(b"not a tar at all")
    with pytest.raises(UnsafeArchiveError, match="not a readable tar"):
        unpack_context(path, dest)
