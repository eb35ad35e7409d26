"""A fake Hugging Face hub on 127.0.0.1, spoken to by the real ``huggingface_hub`` client
(``HF_ENDPOINT`` or ``endpoint=``) and by vLLM.

It serves model repositories from local folders, at one commit each (a hash of the files), the
way the hub's HTTP API answers:

- ``GET /api/models/{repo}[/revision/{rev}]`` — the model's info (``sha``, ``siblings``; with
  ``?blobs=true`` their ``size`` and ``lfs``), ``gated`` for a gated repository;
- ``GET /api/models/{repo}/tree/{rev}[/{path}]`` — the file listing (``recursive`` ignored:
  always recursive; one page);
- ``HEAD|GET /{repo}/resolve/{rev}/{path}`` — a file, with ``X-Repo-Commit``, ``ETag`` and
  ``Content-Length`` (the sha256 of its content as its etag; no redirects, no Xet).

Refusals carry the hub's ``X-Error-Code`` header, from which the client raises its typed
errors: an unknown repository ``RepoNotFound`` (401), an unknown revision
``RevisionNotFound`` (404), an unknown file ``EntryNotFound`` (404), and a file of a gated
repository asked for without the right token ``GatedRepo`` (401 without a token, 403 with a
wrong one) — the repository's info and listing stay public, as on the hub.

Every request is kept in ``requests`` (method, path, whether it carried a token), so a test
can count what a client asked; the token itself is never kept. ``bytes_served`` counts file
bytes sent by GET.
"""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from runs.demo.local_http import serve_in_thread, server_url, stop_serving

# Files the real hub keeps in LFS (their listing carries an ``lfs`` entry).
_LFS_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt", ".gguf")


@dataclass
class FakeRepo:
    """One model repository: its files (relative path → bytes) and who may read them."""

    repo_id: str
    files: dict[str, bytes]
    gated_token: str | None = None  # set: a gated repository only this token may download
    revisions: tuple[str, ...] = ("main",)

    @property
    def sha(self) -> str:
        digest = hashlib.sha1()
        for path in sorted(self.files):
            digest.update(path.encode() + b"\0" + hashlib.sha256(self.files[path]).digest())
        return digest.hexdigest()

    def knows(self, revision: str) -> bool:
        return revision in self.revisions or revision == self.sha


@dataclass(frozen=True)
class HubRequest:
    method: str
    path: str
    with_token: bool


@dataclass
class FakeHub:
    """The server and what it has seen; start with ``start()``, end with ``stop()``."""

    repos: dict[str, FakeRepo] = field(default_factory=dict)
    requests: list[HubRequest] = field(default_factory=list)
    bytes_served: int = 0
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_folder(
        self,
        repo_id: str,
        folder: Path,
        *,
        gated_token: str | None = None,
        extra: dict | None = None,
    ) -> FakeRepo:
        """Serves every file under ``folder`` (symlinks followed) as ``repo_id``; ``extra``
        adds files (path → bytes) that the folder lacks."""
        files = {
            str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob("*"))
            if path.is_file()
        }
        files.update(extra or {})
        repo = FakeRepo(repo_id=repo_id, files=files, gated_token=gated_token)
        self.repos[repo_id] = repo
        return repo

    @property
    def url(self) -> str:
        return server_url(self._server)

    def start(self) -> FakeHub:
        hub = self

        class Handler(_HubHandler):
            pass

        Handler.hub = hub
        self._server = serve_in_thread(Handler)
        return self

    def stop(self) -> None:
        stop_serving(self._server)
        self._server = None

    def file_requests(self, repo_id: str | None = None) -> list[HubRequest]:
        """The file downloads asked for (GET of ``/resolve/``), of one repository or all."""
        prefix = f"/{repo_id}/resolve/" if repo_id else None
        return [
            r
            for r in self.requests
            if r.method == "GET"
            and "/resolve/" in r.path
            and (prefix is None or r.path.startswith(prefix))
        ]


class _HubHandler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass  # quiet: tests read ``hub.requests`` instead

    # -- answers ---------------------------------------------------------------------------

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head=False):
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    def _json(self, status: int, data, *, head=False) -> None:
        self._send(status, json.dumps(data).encode(), {"Content-Type": "application/json"}, head)

    def _refuse(self, status: int, code: str, message: str, *, head=False) -> None:
        headers = {
            "Content-Type": "application/json",
            "X-Error-Code": code,
            "X-Error-Message": message,
        }
        self._send(status, json.dumps({"error": message}).encode(), headers, head)

    # -- routing ---------------------------------------------------------------------------

    def do_HEAD(self):
        self._route(head=True)

    def do_GET(self):
        self._route(head=False)

    def _token(self) -> str | None:
        value = self.headers.get("Authorization", "")
        return value.removeprefix("Bearer ").strip() or None

    def _route(self, *, head: bool) -> None:
        parsed = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(parsed.path)
        query = urllib.parse.parse_qs(parsed.query)
        with self.hub._lock:
            self.hub.requests.append(HubRequest(self.command, path, self._token() is not None))
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            self._api(parts[2:], query, head=head)
        elif len(parts) >= 5 and parts[2] == "resolve":
            self._resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]), head=head)
        else:
            self._refuse(404, "EntryNotFound", f"no route {path}", head=head)

    def _repo(self, repo_id: str, *, head: bool) -> FakeRepo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._refuse(
                401, "RepoNotFound", "Repository not found", head=head
            )  # as the hub: missing and private look alike
        return repo

    def _api(self, parts: list[str], query, *, head: bool) -> None:
        repo = self._repo("/".join(parts[:2]), head=head)
        if repo is None:
            return
        rest = parts[2:]
        revision = "main"
        if rest[:1] in (["revision"], ["tree"]) and len(rest) >= 2:
            revision = rest[1]
        if not repo.knows(revision):
            self._refuse(404, "RevisionNotFound", f"Invalid rev id: {revision}", head=head)
            return
        if rest[:1] == ["tree"]:
            below = "/".join(rest[2:])
            entries = [
                self._entry(repo, name, tree=True)
                for name in sorted(repo.files)
                if not below or name.startswith(below + "/")
            ]
            self._json(200, entries, head=head)
            return
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        info = {
            "_id": repo.sha[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "sha": repo.sha,
            "private": False,
            "gated": "manual" if repo.gated_token else False,
            "disabled": False,
            "tags": [],
            "siblings": [
                self._entry(repo, name, tree=False, sizes=blobs) for name in sorted(repo.files)
            ],
        }
        self._json(200, info, head=head)

    @staticmethod
    def _entry(repo: FakeRepo, name: str, *, tree: bool, sizes: bool = True) -> dict:
        content = repo.files[name]
        oid = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
        lfs = (
            {"oid": hashlib.sha256(content).hexdigest(), "size": len(content), "pointerSize": 134}
            if name.endswith(_LFS_SUFFIXES)
            else None
        )
        if tree:
            entry = {"type": "file", "oid": oid, "size": len(content), "path": name}
            if lfs:
                entry["lfs"] = lfs
            return entry
        entry = {"rfilename": name}
        if sizes:
            entry.update({"blobId": oid, "size": len(content)})
            if lfs:
                entry["lfs"] = {"sha256": lfs["oid"], "size": lfs["size"], "pointerSize": 134}
        return entry

    def _resolve(self, repo_id: str, revision: str, name: str, *, head: bool) -> None:
        repo = self._repo(repo_id, head=head)
        if repo is None:
            return
        if not repo.knows(revision):
            self._refuse(404, "RevisionNotFound", f"Invalid rev id: {revision}", head=head)
            return
        token = self._token()
        if repo.gated_token is not None and token != repo.gated_token:
            status = 401 if token is None else 403
            message = f"Access to model {repo_id} is restricted. You must have access to it."
            self._refuse(status, "GatedRepo", message, head=head)
            return
        content = repo.files.get(name)
        if content is None:
            self._refuse(404, "EntryNotFound", f"{name} does not exist", head=head)
            return
        etag = hashlib.sha256(content).hexdigest()
        headers = {
            "Content-Type": "application/octet-stream",
            "X-Repo-Commit": repo.sha,
            "ETag": f'"{etag}"',
            "Accept-Ranges": "bytes",
        }
        if not head:
            with self.hub._lock:
                self.hub.bytes_served += len(content)
        self._send(200, content, headers, head)
