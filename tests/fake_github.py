"""A local stand-in for the part of GitHub's REST API the workflows' scripts call, with the API's
shapes (the fields the documentation lists for each answer, pagination by `Link` header, redirects
to storage for an artifact's zip) and its errors (`{"message", "documentation_url"}` bodies, the
rate limit's 403 with `x-ratelimit-remaining: 0`).

    with FakeGitHub(runs, default_branch="main") as api:   # api.url -> GITHUB_API_URL
        ...
        api.requests   # the paths asked, in order

`runs`: newest first, as the API lists them; each {"id", "event", "head_branch", "artifacts":
{name: {relative path: text}}, "expired": [names]}. `fail` maps a path prefix to an HTTP status.
Issues, their comments and labels are kept as the API would (`api.issues`, `api.comments`);
`api.calls` holds every request that changes something: (method, path, its JSON body).
"""

from __future__ import annotations

import io
import json
import threading
import urllib.parse
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DOCS = "https://docs.github.com/rest"
MESSAGES = {401: "Bad credentials", 403: "API rate limit exceeded for installation ID 1234.", 404: "Not Found",
            500: "Server Error", 502: "Server Error"}


class FakeGitHub:
    def __init__(self, runs, default_branch="main", repo="owner/project", fail=None):
        self.runs, self.default_branch, self.repo, self.fail = runs, default_branch, repo, dict(fail or {})
        self.requests: list[str] = []
        self.calls: list[tuple[str, str, dict]] = []
        self.issues: list[dict] = []
        self.comments: dict[int, list[str]] = {}
        self.labels: set[str] = set()
        self.artifacts = {}  # id -> (run, name)
        for run in runs:
            for name in run.get("artifacts", {}):
                self.artifacts[len(self.artifacts) + 1] = (run, name)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    # --- the answers ---

    def answer(self, path: str, query: dict):
        prefix = f"/repos/{self.repo}"
        for failing, status in self.fail.items():
            if path.startswith(failing):
                return status, {"message": MESSAGES[status], "documentation_url": DOCS}, {}
        if path == prefix:
            return 200, {"id": 1, "full_name": self.repo, "default_branch": self.default_branch, "private": False}, {}
        if path == f"{prefix}/issues":
            return 200, self._open_issues(query), {}
        if path == f"{prefix}/actions/workflows/nightly.yml/runs":
            runs = [self._run(r) for r in self.runs
                    if query.get("event", r["event"]) == r["event"] and query.get("branch", r["head_branch"]) ==
                    r["head_branch"]]
            return self._page(path, query, "workflow_runs", runs)
        if path.startswith(f"{prefix}/actions/runs/") and path.endswith("/artifacts"):
            run_id = int(path.split("/")[-2])
            run = next((r for r in self.runs if r["id"] == run_id), None)
            if run is None:
                return 404, {"message": "Not Found", "documentation_url": DOCS}, {}
            found = [self._artifact(i, r, name) for i, (r, name) in self.artifacts.items() if r is run]
            return self._page(path, query, "artifacts", found)
        if path.startswith(f"{prefix}/actions/artifacts/") and path.endswith("/zip"):
            artifact = int(path.split("/")[-2])
            if artifact not in self.artifacts:
                return 404, {"message": "Not Found", "documentation_url": DOCS}, {}
            run, name = self.artifacts[artifact]
            if name in run.get("expired", ()):
                return 410, {"message": "Artifact has expired", "documentation_url": DOCS}, {}
            return 302, None, {"Location": f"{self.url}/storage/{artifact}.zip?sig=signed"}
        if path.startswith("/storage/"):
            run, name = self.artifacts[int(path.rsplit("/", 1)[1].split(".")[0])]
            return 200, _zip(run["artifacts"][name]), {"Content-Type": "application/zip"}
        return 404, {"message": "Not Found", "documentation_url": DOCS}, {}

    def change(self, method: str, path: str, body: dict):
        """A POST or PATCH: labels, issues and their comments."""
        prefix = f"/repos/{self.repo}"
        for failing, status in self.fail.items():
            if path.startswith(failing):
                return status, {"message": MESSAGES[status], "documentation_url": DOCS}, {}
        if (method, path) == ("POST", f"{prefix}/labels"):
            if body["name"] in self.labels:
                return 422, {"message": "Validation Failed", "errors": [{"code": "already_exists"}],
                             "documentation_url": DOCS}, {}
            self.labels.add(body["name"])
            return 201, {"name": body["name"], "color": body.get("color")}, {}
        if (method, path) == ("POST", f"{prefix}/issues"):
            issue = {"number": len(self.issues) + 1, "title": body["title"], "body": body.get("body"), "state": "open",
                     "state_reason": None, "labels": [{"name": n} for n in body.get("labels", [])],
                     "html_url": f"https://github.com/{self.repo}/issues/{len(self.issues) + 1}"}
            self.issues.append(issue)
            return 201, issue, {}
        parts = path[len(prefix):].split("/")  # ["", "issues", N] or ["", "issues", N, "comments"]
        if len(parts) >= 3 and parts[1] == "issues" and parts[2].isdigit() and int(parts[2]) <= len(self.issues):
            issue = self.issues[int(parts[2]) - 1]
            if method == "PATCH" and len(parts) == 3:
                issue.update({k: v for k, v in body.items() if k in ("title", "body", "state", "state_reason")})
                return 200, issue, {}
            if method == "POST" and parts[3:] == ["comments"]:
                self.comments.setdefault(issue["number"], []).append(body["body"])
                return 201, {"id": sum(map(len, self.comments.values())), "body": body["body"]}, {}
        return 404, {"message": "Not Found", "documentation_url": DOCS}, {}

    def _open_issues(self, query):
        wanted = set(filter(None, query.get("labels", "").split(",")))
        state = query.get("state", "open")
        return [i for i in self.issues if (state == "all" or i["state"] == state)
                and wanted <= {label["name"] for label in i["labels"]}]

    def _run(self, run):
        return {"id": run["id"], "name": "Nightly matrix", "event": run["event"], "head_branch": run["head_branch"],
                "status": "completed", "conclusion": run.get("conclusion", "success"), "run_number": run["id"],
                "path": ".github/workflows/nightly.yml", "html_url": f"https://github.com/{self.repo}/actions/runs/"
                f"{run['id']}", "created_at": "2026-11-20T03:17:00Z"}

    def _artifact(self, artifact_id, run, name):
        return {"id": artifact_id, "node_id": f"MDg6QXJ0aWZhY3Q{artifact_id}", "name": name, "size_in_bytes": 1024,
                "url": f"{self.url}/repos/{self.repo}/actions/artifacts/{artifact_id}",
                "archive_download_url": f"{self.url}/repos/{self.repo}/actions/artifacts/{artifact_id}/zip",
                "expired": name in run.get("expired", ()), "created_at": "2026-11-20T03:40:00Z",
                "workflow_run": {"id": run["id"], "head_branch": run["head_branch"]}}

    def _page(self, path, query, key, items):
        per_page, page = int(query.get("per_page", 30)), int(query.get("page", 1))
        chunk = items[(page - 1) * per_page: page * per_page]
        headers = {}
        if page * per_page < len(items):
            rest = urllib.parse.urlencode({**query, "page": page + 1})
            headers["Link"] = f'<{self.url}{path}?{rest}>; rel="next"'
        return 200, {"total_count": len(items), key: chunk}, headers


def _zip(files: dict) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def _handler(api: FakeGitHub):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            parsed = urllib.parse.urlsplit(self.path)
            api.requests.append(parsed.path)
            query = dict(urllib.parse.parse_qsl(parsed.query))
            status, body, headers = api.answer(parsed.path, query)
            data = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            if status == 403 and isinstance(body, dict) and "rate limit" in body["message"]:
                headers = {**headers, "x-ratelimit-remaining": "0", "x-ratelimit-reset": "1764040000"}
            for key, value in {"Content-Type": "application/json; charset=utf-8", **headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _change(self, method):
            parsed = urllib.parse.urlsplit(self.path)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            api.calls.append((method, parsed.path, body))
            self._send(*api.change(method, parsed.path, body))

        def do_POST(self):  # noqa: N802
            self._change("POST")

        def do_PATCH(self):  # noqa: N802
            self._change("PATCH")

        def _send(self, status, body, headers):
            data = json.dumps(body).encode()
            self.send_response(status)
            for key, value in {"Content-Type": "application/json; charset=utf-8", **headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    return Handler
