"""The Core API's TensorBoard files: scalars written as event files TensorBoard itself reads (with
Determined's tag names), kept at Determined's path in checkpoint storage, uploaded only when new or
changed, fetched back by a TensorBoard task in place (TensorBoard keeps its files open)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

from cairn.core.tensorboard import TensorboardFiles, TensorboardMode
from cairn.tensorboard import layout
from cairn.tensorboard.event_file import ScalarEventWriter, crc32c, masked_crc32c, record
from cairn.tensorboard.fetcher import TensorboardFetcher, TrialSource
from cairn.tensorboard.uploader import TensorboardUploader

REPO = Path(__file__).resolve().parents[3]
TASK_PYTHON = REPO / ".venv-task" / "bin" / "python"


def test_records_are_framed_and_checksummed_as_tfrecord() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    framed = record(b"abc")
    (length,) = struct.unpack("<Q", framed[:8])
    assert length == 3 and framed[12:15] == b"abc"
    assert struct.unpack("<I", framed[8:12])[0] == masked_crc32c(framed[:8])
    assert struct.unpack("<I", framed[15:])[0] == masked_crc32c(b"abc")


@pytest.mark.skipif(not TASK_PYTHON.exists(), reason="the task environment (with tensorboard) is not built")
def test_tensorboard_reads_the_scalars_the_core_api_writes(tmp_path: Path) -> None:
    files = TensorboardFiles(TensorboardMode.AUTO, tmp_path / "tb", _uploader(tmp_path, tmp_path / "tb"))
    files.on_report(
        "training", 10, {"loss": 0.5, "note": "text", "flag": True}, [{"loss": 0.9}, {"loss": 0.7}]
    )
    files.on_report("validation", 10, {"loss": 0.4, "val_acc": 0.8}, None)
    files.sync()
    files.on_report("training", 20, {"loss": 0.25}, None)
    files.close()
    script = (
        "import json,sys\n"
        "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
        "ea = EventAccumulator(sys.argv[1]); ea.Reload()\n"
        "tags = ea.Tags()['scalars']\n"
        "print(json.dumps({t: [[e.step, round(e.value, 4)] for e in ea.Scalars(t)] for t in tags}))\n"
    )
    out = subprocess.run(
        [str(TASK_PYTHON), "-c", script, str(tmp_path / "tb")], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == {
        # Batch metrics at their own steps; the report's own value only where no batch had it.
        "Determined/loss": [[8, 0.9], [9, 0.7], [20, 0.25]],
        "Determined/val_loss": [[10, 0.4]],
        "Determined/val_acc": [[10, 0.8]],
    }


def test_files_live_at_determineds_path_beside_checkpoints(tmp_path: Path) -> None:
    assert layout.trial_dir("c1", 3, 7) == "c1/tensorboard/experiment/3/trial/7"
    shared = {"type": "shared_fs", "host_path": "/mnt", "storage_path": "ckpts", "save_trial_best": 1}
    assert layout.section_below(shared, "c1/tensorboard") == {
        **shared,
        "storage_path": "ckpts/c1/tensorboard",
    }
    assert layout.section_below({"type": "directory", "container_path": "/d"}, "x/y") == {
        "type": "shared_fs",
        "host_path": "/d",
        "storage_path": "x/y",
    }
    assert layout.section_below({"type": "s3", "bucket": "b", "prefix": "p/"}, "x")["prefix"] == "p/x"
    with pytest.raises(ValueError, match="relative_dir"):
        layout.section_below(shared, "../escape")
    with pytest.raises(ValueError, match="cluster_id"):
        layout.experiments_dir("a/b")


def _uploader(tmp_path: Path, local: Path) -> TensorboardUploader:
    storage = {"type": "shared_fs", "host_path": str(tmp_path / "storage")}
    return TensorboardUploader.for_trial(storage, "c1", 3, 7, local)


def test_only_new_or_changed_files_are_uploaded_and_a_mangler_renames(tmp_path: Path) -> None:
    local = tmp_path / "local"
    (local / "sub").mkdir(parents=True)
    (local / "events.out.tfevents.1.h").write_bytes(b"a")
    (local / "sub" / "p.trace.json").write_bytes(b"t")
    (local / "notes.txt").write_bytes(b"not TensorBoard's")
    uploader = _uploader(tmp_path, local)
    assert uploader.sync() == 2 and uploader.sync() == 0
    stored = tmp_path / "storage" / layout.trial_dir("c1", 3, 7)
    assert sorted(p.relative_to(stored).as_posix() for p in stored.rglob("*") if p.is_file()) == [
        "events.out.tfevents.1.h",
        "sub/p.trace.json",
    ]
    with open(local / "events.out.tfevents.1.h", "ab") as f:
        f.write(b"b")
    assert uploader.sync() == 1 and (stored / "events.out.tfevents.1.h").read_bytes() == b"ab"
    (local / "events.out.tfevents.2.h").write_bytes(b"c")
    assert uploader.sync(mangler=lambda path, rank: Path(f"rank{rank}") / path) == 1
    assert (stored / "rank0" / "events.out.tfevents.2.h").read_bytes() == b"c"


def test_manual_mode_uploads_on_request_and_auto_refuses_to(tmp_path: Path) -> None:
    local = tmp_path / "local"
    manual = TensorboardFiles(TensorboardMode.MANUAL, local, _uploader(tmp_path, local))
    manual.on_report("training", 1, {"loss": 1.0}, None)
    assert not local.exists()  # MANUAL writes nothing itself
    local.mkdir()
    (local / "events.out.tfevents.9.mine").write_bytes(b"mine")
    manual.upload()
    assert (tmp_path / "storage" / layout.trial_dir("c1", 3, 7) / "events.out.tfevents.9.mine").exists()
    with pytest.raises(RuntimeError, match="MANUAL"):
        TensorboardFiles(TensorboardMode.AUTO, local, None).upload()


def test_a_tensorboard_task_fetches_each_trial_into_its_own_run_growing_files_in_place(
    tmp_path: Path,
) -> None:
    storage = {"type": "shared_fs", "host_path": str(tmp_path / "storage")}
    stored = tmp_path / "storage" / layout.trial_dir("c1", 3, 7)
    stored.mkdir(parents=True)
    (stored / "events.out.tfevents.1.h").write_bytes(b"one")
    fetcher = TensorboardFetcher(
        "c1", [TrialSource(3, 7, storage), TrialSource(3, 8, storage)], tmp_path / "runs"
    )
    assert fetcher.fetch_once() == 1 and fetcher.fetch_once() == 0
    local = tmp_path / "runs" / layout.run_name(3, 7) / "events.out.tfevents.1.h"
    inode = os.stat(local).st_ino
    with open(stored / "events.out.tfevents.1.h", "ab") as f:
        f.write(b" two")
    assert fetcher.fetch_once() == 1
    assert local.read_bytes() == b"one two" and os.stat(local).st_ino == inode


def test_the_writer_rolls_to_a_new_file_that_sorts_after_the_last(tmp_path: Path) -> None:
    writer = ScalarEventWriter(tmp_path)
    writer.add_scalar("a", 1.0, 1)
    writer.flush()
    first = writer.current_file
    writer.roll()
    writer.add_scalar("a", 2.0, 2)
    writer.flush()
    assert first is not None and writer.current_file is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name, writer.current_file.name]


def test_the_batch_encoder_writes_what_the_record_encoder_writes() -> None:
    """ScalarEventWriter encodes its pending steps in one loop (event_file._records): byte for
    byte the records record(scalars_event(...)) makes, one event per step with its plottable values
    (strings and bools left out, a float32's overflow as infinity), for steps on every side of the
    varint's fast paths and long tags; a step with nothing to plot writes nothing."""
    from cairn.tensorboard import event_file

    def tag_of(name: str) -> str:
        return f"Determined/{name}"

    steps: list[event_file.PendingStep] = [
        (0, 1795750000.25, {"loss": 0.5, "note": "text", "flag": True}, tag_of, frozenset()),
        (127, 1795750001.5, {"val_accuracy": -3.0e38, "lr": 1e-9, "big": 10**400}, tag_of, frozenset()),
        (128, 1795750002.0, {"x" * 300: float("nan"), "skipped": 1.0}, tag_of, frozenset({"skipped"})),
        (2**14 + 1, 1795750003.125, {"loss": 1e300}, tag_of, frozenset()),
        (2**21 + 5, 1795750004.0, {"only": "text"}, tag_of, frozenset()),
        (10**12, 1795750005.0, {"loss": 7}, tag_of, frozenset()),
    ]
    expected = b"".join(
        [
            event_file.record(event_file.scalars_event([("Determined/loss", 0.5)], 0, 1795750000.25)),
            event_file.record(
                event_file.scalars_event(
                    [
                        ("Determined/val_accuracy", -3.0e38),
                        ("Determined/lr", 1e-9),
                        ("Determined/big", float("inf")),
                    ],
                    127,
                    1795750001.5,
                )
            ),
            event_file.record(
                event_file.scalars_event([("Determined/" + "x" * 300, float("nan"))], 128, 1795750002.0)
            ),
            event_file.record(
                event_file.scalars_event([("Determined/loss", float("inf"))], 2**14 + 1, 1795750003.125)
            ),
            event_file.record(event_file.scalars_event([("Determined/loss", 7.0)], 10**12, 1795750005.0)),
        ]
    )
    assert event_file._records(steps) == expected
    # The varint's fast paths agree with the general loop on each side of their bounds.
    for value in (0, 127, 128, 2**14 - 1, 2**14, 2**21 - 1, 2**21, 10**12, -1):
        assert event_file._varint(value) == _varint_by_the_book(value)


def _varint_by_the_book(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value >> 7 else 0))
        value >>= 7
        if not value:
            return bytes(out)
