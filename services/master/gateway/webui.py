"""Serves the built WebUI (webui/dist, made by `npm run build`) from the master's HTTP server at `/`.

The WebUI is a single-page app: any GET for a path that is not a file of the build and does not
look like one (no extension) gets index.html, and the app picks the page from the path, so deep
links work. /api/... is never answered here, so an unknown API path stays a JSON 404.

Vite names every file under assets/ by a hash of its content, so those are cached for a year;
index.html names the current hashes and is revalidated on every load (no-cache + ETag), so a new
build shows up on the next reload. Text files are gzipped once per version and kept in memory.

Without a build the master still answers `/` with a short page saying how to make one.
"""

from __future__ import annotations

import gzip
import hashlib
import mimetypes
import threading
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from urllib.parse import unquote, urlsplit

from services.common.logging import get_logger
from services.master.gateway.http_answers import PlainRoute, Response
from services.master.gateway.http_request import HttpRequest

log = get_logger(__name__)

DEFAULT_DIST = Path(__file__).resolve().parents[3] / "webui" / "dist"

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".txt": "text/plain; charset=utf-8",
    ".webmanifest": "application/manifest+json",
}
COMPRESSIBLE = (".html", ".js", ".mjs", ".css", ".json", ".map", ".svg", ".txt", ".webmanifest")
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
# The app talks only to its own origin; nothing is loaded from anywhere else.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "script-src 'self'; object-src 'none'; base-uri 'self'; frame-ancestors 'self'"
)
MAX_CACHED_BYTES = 32 * 1024 * 1024

NOT_BUILT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Cairn — WebUI not built</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 3rem auto; line-height: 1.5">
<h1>Cairn's WebUI is not built</h1>
<p>The master is running, but it found no WebUI files in <code>{dist}</code>.</p>
<p>Build them (Node.js 20.19+ and npm needed), then reload this page:</p>
<pre style="background: #f3f4f6; padding: 1rem">cd webui &amp;&amp; npm ci &amp;&amp; npm run build</pre>
<p><code>make install</code> does the same when npm is available. The REST API at
<code>/api/v1</code> and the CLI work without it.</p>
</body></html>
"""


@dataclass(frozen=True)
class _Asset:
    body: bytes
    gzipped: bytes | None
    etag: str


class WebUiFiles:
    """Reads files of one build directory, keeping each version's bytes (and gzip) in memory."""

    def __init__(self, dist: Path) -> None:
        self.dist = dist.resolve()
        self._cache: dict[Path, tuple[int, int, _Asset]] = {}
        self._cached_bytes = 0
        self._lock = threading.Lock()

    def is_built(self) -> bool:
        return (self.dist / "index.html").is_file()

    def resolve(self, url_path: str) -> Path | None:
        """The file a URL path names inside the build, or None (also for any path leaving it)."""
        relative = unquote(url_path).lstrip("/")
        if not relative or "\x00" in relative:
            return None
        candidate = (self.dist / relative).resolve()
        if not candidate.is_relative_to(self.dist) or not candidate.is_file():
            return None
        return candidate

    def load(self, path: Path) -> _Asset:
        stat = path.stat()
        with self._lock:
            cached = self._cache.get(path)
            if cached is not None and cached[0] == stat.st_mtime_ns and cached[1] == stat.st_size:
                return cached[2]
        body = path.read_bytes()
        gzipped = None
        if path.suffix in COMPRESSIBLE and len(body) > 1024:
            packed = gzip.compress(body, compresslevel=6, mtime=0)
            gzipped = packed if len(packed) < len(body) else None
        asset = _Asset(body=body, gzipped=gzipped, etag='"' + hashlib.sha256(body).hexdigest()[:32] + '"')
        with self._lock:
            size = len(body) + len(gzipped or b"")
            if self._cached_bytes + size > MAX_CACHED_BYTES:
                self._cache.clear()
                self._cached_bytes = 0
            self._cache[path] = (stat.st_mtime_ns, stat.st_size, asset)
            self._cached_bytes += size
        return asset


def _content_type(path: Path) -> str:
    known = CONTENT_TYPES.get(path.suffix.lower())
    if known:
        return known
    guessed, _ = mimetypes.guess_type(path.name)
    return guessed or "application/octet-stream"


def _accepts_gzip(req: HttpRequest) -> bool:
    accepted = req.headers.get("Accept-Encoding", "")
    return any(part.split(";")[0].strip().lower() == "gzip" for part in accepted.split(","))


def _file_response(req: HttpRequest, files: WebUiFiles, path: Path, cache_control: str) -> Response:
    asset = files.load(path)
    headers = {
        "Cache-Control": cache_control,
        "ETag": asset.etag,
        "Vary": "Accept-Encoding",
        "X-Content-Type-Options": "nosniff",
    }
    content_type = _content_type(path)
    if content_type.startswith("text/html"):
        headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        headers["Referrer-Policy"] = "same-origin"
    if req.headers.get("If-None-Match") == asset.etag:
        return Response(HTTPStatus.NOT_MODIFIED, b"", content_type, headers)
    if asset.gzipped is not None and _accepts_gzip(req):
        headers["Content-Encoding"] = "gzip"
        return Response(HTTPStatus.OK, asset.gzipped, content_type, headers)
    return Response(HTTPStatus.OK, asset.body, content_type, headers)


def _looks_like_file(url_path: str) -> bool:
    """Paths with an extension in their last part name files; the app's own paths never do."""
    return "." in url_path.rsplit("/", 1)[-1]


def webui_routes(dist: Path | None = None) -> list[PlainRoute]:
    """The WebUI route; put it after every other route, since it answers any remaining GET."""
    files = WebUiFiles(dist or DEFAULT_DIST)
    if not files.is_built():
        log.warning(
            "webui not built: serving a page that says how to build it",
            dist=str(files.dist),
            build="cd webui && npm ci && npm run build",
        )
    not_built = NOT_BUILT_PAGE.format(dist=files.dist).encode()

    def webui(req: HttpRequest) -> Response | None:
        if req.command not in ("GET", "HEAD"):
            return None
        url_path = urlsplit(req.path).path or "/"
        if url_path == "/api" or url_path.startswith("/api/"):
            return None
        try:
            if files.is_built():
                return _serve(req, files, url_path)
        except OSError:
            # A rebuild replaced the files under us: the next reload finds the new ones.
            log.warning("webui file vanished while serving", path=url_path)
        return Response(
            HTTPStatus.SERVICE_UNAVAILABLE,
            not_built,
            "text/html; charset=utf-8",
            {"Cache-Control": "no-store"},
        )

    return [webui]


def _serve(req: HttpRequest, files: WebUiFiles, url_path: str) -> Response:
    found = files.resolve(url_path)
    if found is not None:
        immutable = found.parent == files.dist / "assets"
        return _file_response(req, files, found, IMMUTABLE if immutable else REVALIDATE)
    if _looks_like_file(url_path):
        return Response(
            HTTPStatus.NOT_FOUND,
            b"not found\n",
            "text/plain; charset=utf-8",
            {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
        )
    return _file_response(req, files, files.dist / "index.html", REVALIDATE)
