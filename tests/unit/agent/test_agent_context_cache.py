"""Model definitions kept by digest: a start whose archive the agent already fetched (every trial of
an experiment has the same) unpacks a kept copy; an archive is kept only when its bytes are those
the master named; the keep is bounded."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from services.agent.containers.context_cache import ContextCache
from tests.unit.agent.agent_master_double import MasterServer, MasterStore, wait_until
from tests.unit.agent.agent_processes import AgentProcess, wait_terminated
from tests.unit.agent.test_agent_containers import model_definition

READ_MODEL = "cat model/hello.txt"


def test_later_containers_unpack_the_kept_archive_instead_of_fetching(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    launch_agent(master.address)
    master.double.wait_connected()
    archive = model_definition({"model/hello.txt": "hello from the model\n"})
    digest = hashlib.sha256(archive).hexdigest()
    for name in ("k1", "k2", "k3"):
        store.contexts[f"alloc-{name}"] = archive
        master.double.start(name, [READ_MODEL], shell=True, has_context=True, context_digest=digest)
        wait_terminated(store, name)
        final = store.final(name)
        assert final is not None and final.exit_code == 0, store.messages(name)
        wait_until(lambda: store.lines(name), 5, "the model's line")  # noqa: B023
        assert [e.message for e in store.lines(name)] == ["hello from the model"]
    assert master.double.fetches == ["alloc-k1"]
    notes = [e.message for e in store.lines("k2", source="agent")]
    assert any("unpacked the model definition (kept from an earlier container)" in n for n in notes)


def test_an_archive_that_is_not_what_the_master_named_is_used_and_not_kept(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    launch_agent(master.address)
    master.double.wait_connected()
    wrong = "0" * 64
    for name in ("w1", "w2"):
        store.contexts[f"alloc-{name}"] = model_definition({"model/hello.txt": f"{name}\n"})
        master.double.start(name, [READ_MODEL], shell=True, has_context=True, context_digest=wrong)
        wait_terminated(store, name)
        wait_until(lambda: store.lines(name), 5, "the model's line")  # noqa: B023
        assert [e.message for e in store.lines(name)] == [name]
    assert master.double.fetches == ["alloc-w1", "alloc-w2"]
    notes = " ".join(e.message for e in store.lines("w1", source="agent"))
    assert f"are not those the master named ({wrong}): used, not kept" in notes


def test_the_least_recently_used_archives_go_first(tmp_path: Path) -> None:
    cache = ContextCache(tmp_path / "contexts", max_archives=2, max_bytes=1 << 20)
    digests = []
    for index in range(3):
        source = tmp_path / f"archive-{index}"
        source.write_bytes(f"archive {index}".encode())
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        digests.append(digest)
        cache.keep(digest, source)
        os.utime(tmp_path / "contexts" / f"{digest}.tar.gz", (index, index))  # distinct ages
    assert not cache.take(digests[0], tmp_path / "taken-0")  # the oldest went
    assert cache.take(digests[2], tmp_path / "taken-2")
    assert (tmp_path / "taken-2").read_bytes() == b"archive 2"
    assert not cache.take("not a digest", tmp_path / "taken-x")
    # The taken link is the container's own: an eviction leaves it.
    for path in (tmp_path / "contexts").glob("*.tar.gz"):
        path.unlink()
    assert (tmp_path / "taken-2").read_bytes() == b"archive 2"


def test_a_kept_archive_that_cannot_be_linked_is_fetched_instead(tmp_path: Path) -> None:
    cache = ContextCache(tmp_path / "contexts")
    source = tmp_path / "archive"
    source.write_bytes(b"archive")
    digest = hashlib.sha256(b"archive").hexdigest()
    cache.keep(digest, source)
    (tmp_path / "occupied").write_bytes(b"")  # os.link refuses an existing name: EEXIST
    assert not cache.take(digest, tmp_path / "occupied")
