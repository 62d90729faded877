"""Storage in an S3 bucket (AWS or a compatible server through `endpoint_url`).

A checkpoint's files are objects `<prefix>/<uuid>/<path>`. boto3 is imported only when a client is
first needed, so the client package works without it for the other backends. S3 keeps no
permission bits: files come back with mode 0644.
"""

from __future__ import annotations

import contextlib
import secrets
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from cairn.storage.atomic import DEFAULT_FILE_MODE, PartialFile
from cairn.storage.base import Resources, StorageManager, files_to_upload
from cairn.storage.chunks import DEFAULT_CHUNK_BYTES, FileChunk, chunks_of
from cairn.storage.config import SECTION, S3StorageConfig
from cairn.storage.errors import CheckpointNotFound, StorageError
from cairn.storage.globs import Selector, glob_selector
from cairn.storage.local_tree import LocalFile
from cairn.storage.paths import check_checkpoint_uuid, normalize_relative_path, target_for_write

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# Files moved at once in an upload or download; large files are also split into parts by boto3.
TRANSFER_THREADS = 8
# The most keys one DeleteObjects request takes.
_DELETE_BATCH = 1000

_Item = TypeVar("_Item")


def _boto3_error_types() -> tuple[type[Exception], tuple[type[Exception], ...]]:
    """boto3's request errors and its other errors, importing boto3 on first use."""
    try:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError as exc:
        raise StorageError(f"{SECTION}.type: s3 storage needs boto3 (pip install boto3)") from exc
    return ClientError, (BotoCoreError, Boto3Error)


@contextlib.contextmanager
def _s3_errors(
    action: str, config: S3StorageConfig, *, not_found_means_no_bucket: bool = False
) -> Iterator[None]:
    """Turn boto3's errors into StorageError messages that say which bucket and what failed.

    HEAD requests carry no error body, so a missing bucket shows there only as "404".
    """
    client_error, other_errors = _boto3_error_types()
    missing_bucket = f"{SECTION}.bucket: bucket {config.bucket!r} does not exist"
    try:
        yield
    except client_error as exc:
        error = getattr(exc, "response", {}).get("Error", {})
        code = error.get("Code", "")
        if code == "NoSuchBucket" or (not_found_means_no_bucket and code in ("404", "NotFound")):
            raise StorageError(missing_bucket) from exc
        message = error.get("Message", "")
        raise StorageError(f"s3://{config.bucket}: {action} failed: {code} {message}".rstrip()) from exc
    except other_errors as exc:
        # upload_file wraps request errors in its own exception type, with the code in the text.
        if "NoSuchBucket" in str(exc):
            raise StorageError(missing_bucket) from exc
        raise StorageError(f"s3://{config.bucket}: {action} failed: {exc}") from exc


def _run_all(function: Callable[[_Item], object], items: list[_Item]) -> None:
    """Run `function` on every item with a few threads; the first error is raised after all ran."""
    if len(items) <= 1:
        for item in items:
            function(item)
        return
    with ThreadPoolExecutor(max_workers=TRANSFER_THREADS, thread_name_prefix="cairn-s3") as pool:
        futures = [pool.submit(function, item) for item in items]
    for future in futures:
        future.result()


class S3StorageManager(StorageManager):
    def __init__(self, config: S3StorageConfig) -> None:
        self._config = config
        self._client: S3Client | None = None
        self._client_lock = threading.Lock()
        self.description = f"s3 storage at s3://{config.bucket}/{config.prefix}"

    @property
    def client(self) -> S3Client:
        with self._client_lock:
            if self._client is None:
                self._client = self._new_client()
            return self._client

    def _new_client(self) -> S3Client:
        _boto3_error_types()  # a clear error when boto3 is missing
        import boto3
        from botocore.config import Config

        options: dict[str, Any] = {"retries": {"max_attempts": 5, "mode": "standard"}}
        if self._config.endpoint_url:
            # S3-compatible servers (MinIO, Ceph, ...) expect bucket names in the path.
            options["s3"] = {"addressing_style": "path"}
        session = boto3.session.Session(
            aws_access_key_id=self._config.access_key, aws_secret_access_key=self._config.secret_key
        )
        return session.client("s3", endpoint_url=self._config.endpoint_url, config=Config(**options))

    def key_prefix(self, checkpoint_uuid: str) -> str:
        check_checkpoint_uuid(checkpoint_uuid)
        return f"{self._config.prefix}/{checkpoint_uuid}/" if self._config.prefix else f"{checkpoint_uuid}/"

    def _objects(self, checkpoint_uuid: str) -> dict[str, tuple[str, int]]:
        """Relative path → (key, size) of the checkpoint's objects."""
        prefix = self.key_prefix(checkpoint_uuid)
        found: dict[str, tuple[str, int]] = {}
        with _s3_errors(f"listing {prefix}", self._config):
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self._config.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    key = item["Key"]
                    # Keys ending in "/" are folder markers some tools create, not files.
                    if not key.endswith("/"):
                        found[key[len(prefix) :]] = (key, item.get("Size", 0))
        return found

    @contextlib.contextmanager
    def store_path(self, checkpoint_uuid: str) -> Iterator[Path]:
        check_checkpoint_uuid(checkpoint_uuid)
        with tempfile.TemporaryDirectory(prefix="cairn-store-") as local:
            yield Path(local)
            self.upload(Path(local), checkpoint_uuid, move=True)

    @contextlib.contextmanager
    def restore_path(self, checkpoint_uuid: str, selector: Selector | None = None) -> Iterator[Path]:
        check_checkpoint_uuid(checkpoint_uuid)
        with tempfile.TemporaryDirectory(prefix="cairn-restore-") as local:
            self.download(checkpoint_uuid, Path(local), selector)
            yield Path(local)

    def upload(
        self,
        local_dir: Path,
        checkpoint_uuid: str,
        paths: Iterable[str] | None = None,
        *,
        move: bool = False,
    ) -> Resources:
        prefix = self.key_prefix(checkpoint_uuid)
        files = files_to_upload(local_dir, paths)

        def put(file: LocalFile) -> None:
            with _s3_errors(f"uploading {file.relative_path}", self._config):
                self.client.upload_file(str(file.source), self._config.bucket, prefix + file.relative_path)

        _run_all(put, files)
        return {file.relative_path: file.size for file in files}

    def download(self, checkpoint_uuid: str, local_dir: Path, selector: Selector | None = None) -> Resources:
        objects = self._existing_objects(checkpoint_uuid)
        wanted = sorted(
            (normalize_relative_path(path), key, size)
            for path, (key, size) in objects.items()
            if selector is None or selector(path)
        )

        def fetch(item: tuple[str, str, int]) -> None:
            relative_path, key, _size = item
            partial = PartialFile(target_for_write(local_dir, relative_path), DEFAULT_FILE_MODE)
            try:
                with _s3_errors(f"downloading {relative_path}", self._config):
                    self.client.download_fileobj(self._config.bucket, key, partial)  # type: ignore[arg-type]
                partial.commit()
            except BaseException:
                partial.abort()
                raise

        _run_all(fetch, wanted)
        return {relative_path: size for relative_path, _key, size in wanted}

    def exists(self, checkpoint_uuid: str) -> bool:
        prefix = self.key_prefix(checkpoint_uuid)
        with _s3_errors(f"listing {prefix}", self._config):
            page = self.client.list_objects_v2(Bucket=self._config.bucket, Prefix=prefix, MaxKeys=1)
        return page.get("KeyCount", 0) > 0

    def list_files(self, checkpoint_uuid: str) -> Resources:
        return {path: size for path, (_key, size) in self._objects(checkpoint_uuid).items()}

    def delete(self, checkpoint_uuid: str, globs: Iterable[str] = ()) -> Resources:
        selector = glob_selector(globs)
        objects = self._objects(checkpoint_uuid)
        doomed = sorted(key for path, (key, _size) in objects.items() if selector is None or selector(path))
        for start in range(0, len(doomed), _DELETE_BATCH):
            batch = doomed[start : start + _DELETE_BATCH]
            with _s3_errors(f"deleting objects of {checkpoint_uuid}", self._config):
                answer = self.client.delete_objects(
                    Bucket=self._config.bucket,
                    Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True},
                )
            errors = answer.get("Errors", [])
            if errors:
                first = errors[0]
                raise StorageError(
                    f"s3://{self._config.bucket}: deleting {len(errors)} object(s) of {checkpoint_uuid} "
                    f"failed, first {first.get('Key')}: {first.get('Code')} {first.get('Message', '')}"
                )
        if not doomed:
            return {path: size for path, (_key, size) in objects.items()}
        # Listed again rather than computed: what is left is what storage says is left.
        return self.list_files(checkpoint_uuid)

    def iter_file_chunks(
        self,
        checkpoint_uuid: str,
        selector: Selector | None = None,
        chunk_size: int = DEFAULT_CHUNK_BYTES,
    ) -> Iterator[FileChunk]:
        objects = self._existing_objects(checkpoint_uuid)
        wanted = sorted(
            (normalize_relative_path(path), key)
            for path, (key, _size) in objects.items()
            if selector is None or selector(path)
        )
        return self._chunks_of_objects(wanted, chunk_size)

    def _chunks_of_objects(self, wanted: list[tuple[str, str]], chunk_size: int) -> Iterator[FileChunk]:
        for relative_path, key in wanted:
            with _s3_errors(f"reading {relative_path}", self._config):
                body = self.client.get_object(Bucket=self._config.bucket, Key=key)["Body"]
                try:
                    yield from chunks_of(relative_path, body.read, DEFAULT_FILE_MODE, chunk_size)
                finally:
                    body.close()

    @contextlib.contextmanager
    def staging_dir(self, checkpoint_uuid: str) -> Iterator[Path]:
        check_checkpoint_uuid(checkpoint_uuid)
        with tempfile.TemporaryDirectory(prefix="cairn-upload-") as local:
            yield Path(local)

    def check_writable(self) -> None:
        probe = f"{self._config.prefix}/" if self._config.prefix else ""
        probe += f".cairn-probe-{secrets.token_hex(6)}"
        with _s3_errors("checking bucket", self._config, not_found_means_no_bucket=True):
            self.client.head_bucket(Bucket=self._config.bucket)
        with _s3_errors(f"writing probe object {probe}", self._config):
            self.client.put_object(Bucket=self._config.bucket, Key=probe, Body=b"cairn storage probe\n")
            self.client.delete_object(Bucket=self._config.bucket, Key=probe)

    def _existing_objects(self, checkpoint_uuid: str) -> dict[str, tuple[str, int]]:
        objects = self._objects(checkpoint_uuid)
        if not objects:
            raise CheckpointNotFound(checkpoint_uuid, self.description)
        return objects
