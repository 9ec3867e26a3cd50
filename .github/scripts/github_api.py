"""The few GitHub REST API calls the workflows' scripts make, on the standard library.

The API's address is $GITHUB_API_URL (set on every runner; act and the tests point it at a local
server), the token $GH_TOKEN or $GITHUB_TOKEN, the repository $GH_REPO or $GITHUB_REPOSITORY.
Every failure is a GitHubError naming the request and what the API answered: nothing here turns an
error into an empty answer.
"""

from __future__ import annotations

import io
import json
import os
import re
import time
import urllib.error
import urllib.request
import zipfile

API_VERSION = "2022-11-28"
TIMEOUT = 60
# A transient failure (the API's 5xx, a dropped connection) is tried again, this many times in all,
# waiting RETRY_WAIT, then twice that, ... seconds ($GITHUB_API_RETRY_WAIT: the tests wait less).
ATTEMPTS = 3
RETRY_WAIT = float(os.environ.get("GITHUB_API_RETRY_WAIT") or 5)
TRANSIENT = (500, 502, 503, 504)


class GitHubError(Exception):
    """A request the API refused or could not answer; the message is one line, `status` the HTTP
    status the API answered (None: no answer)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """An artifact's zip answers with a redirect to storage that must not see the token."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class GitHub:
    def __init__(self, api: str | None = None, token: str | None = None, repo: str | None = None):
        self.api = (api or os.environ.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/")
        self.token = token if token is not None else os.environ.get("GH_TOKEN") or os.environ.get("GITHUB_TOKEN")
        self.repo = repo or os.environ.get("GH_REPO") or os.environ.get("GITHUB_REPOSITORY")
        if not self.repo:
            raise GitHubError("no repository: set GH_REPO (owner/name)")
        self.calls = 0  # requests made, for the figures a run prints

    def _open(self, url: str, accept: str = "application/vnd.github+json", follow: bool = True,
              method: str = "GET", body: dict | None = None):
        for attempt in range(1, ATTEMPTS + 1):
            data = None if body is None else json.dumps(body).encode()
            content_type = {} if body is None else {"Content-Type": "application/json"}
            request = urllib.request.Request(url, method=method, data=data,
                                             headers={"Accept": accept, "X-GitHub-Api-Version": API_VERSION,
                                                      "User-Agent": "torch-compile-matrix", **content_type})
            if self.token:
                request.add_unredirected_header("Authorization", f"Bearer {self.token}")
            self.calls += 1
            opener = urllib.request.build_opener(*(() if follow else (_NoRedirect,)))
            try:
                return opener.open(request, timeout=TIMEOUT)
            except urllib.error.HTTPError as error:
                if not follow and error.code in (301, 302, 303, 307, 308):
                    return error  # the caller follows it, without the token
                failure = GitHubError(_describe(url, error, method), error.code)
                if error.code not in TRANSIENT:
                    raise failure from None
            except (urllib.error.URLError, OSError) as error:
                failure = GitHubError(f"{method} {url}: {getattr(error, 'reason', error)}")
            if attempt < ATTEMPTS:
                time.sleep(RETRY_WAIT * 2 ** (attempt - 1))
        raise GitHubError(f"{failure} (tried {ATTEMPTS} times)", failure.status)

    def send(self, method: str, path: str, body: dict) -> dict:
        """A POST or PATCH of `body` (JSON); the API's answer."""
        with self._open(f"{self.api}/{path.lstrip('/')}", method=method, body=body) as response:
            return json.load(response)

    def get(self, path: str) -> dict:
        with self._open(f"{self.api}/{path.lstrip('/')}") as response:
            return json.load(response)

    def pages(self, path: str, key: str, per_page: int = 100, limit: int | None = None):
        """The items under `key` of every page, following the Link header (at most `limit` items)."""
        url = f"{self.api}/{path.lstrip('/')}{'&' if '?' in path else '?'}per_page={per_page}"
        count = 0
        while url:
            with self._open(url) as response:
                body, link = json.load(response), response.headers.get("Link", "")
            for item in body.get(key, []):
                yield item
                count += 1
                if limit is not None and count >= limit:
                    return
            found = re.search(r'<([^>]+)>;\s*rel="next"', link)
            url = found[1] if found else None

    def download_zip(self, artifact_id: int, dest) -> None:
        """An artifact's files, unpacked into `dest`."""
        url = f"{self.api}/repos/{self.repo}/actions/artifacts/{artifact_id}/zip"
        response = self._open(url, follow=False)
        location = response.headers.get("Location")
        if location:
            response.close()
            try:
                response = urllib.request.urlopen(location, timeout=TIMEOUT)  # a signed URL: no token
            except (urllib.error.URLError, OSError) as error:
                raise GitHubError(f"GET {location.split('?')[0]}: {getattr(error, 'reason', error)}") from None
        with response:
            data = response.read()
        try:
            zipfile.ZipFile(io.BytesIO(data)).extractall(dest)
        except zipfile.BadZipFile:
            raise GitHubError(f"artifact {artifact_id}: the download is not a zip file ({len(data)} bytes)") from None


def _describe(url: str, error: urllib.error.HTTPError, method: str = "GET") -> str:
    """`GET URL: 403 API rate limit exceeded ... (resets at ...)`: the API's own message."""
    try:
        message = json.loads(error.read().decode("utf-8", "replace")).get("message") or error.reason
    except (ValueError, AttributeError):
        message = error.reason
    text = f"{method} {url.split('?')[0]}: {error.code} {message}"
    if error.headers.get("x-ratelimit-remaining") == "0":
        text += f" (rate limit; resets at epoch {error.headers.get('x-ratelimit-reset', '?')})"
    return " ".join(text.split())
