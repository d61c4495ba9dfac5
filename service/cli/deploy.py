"""`etrt deploy`: upload, wait until the model serves, describe it.

`POST /models` answers once ingest has checked and stored the model; the model then still has to
be opened for serving, so the deploy waits on the v2 readiness of the version before it reports
success: a script that deploys and then sends traffic must not race the load.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from service.cli import output
from service.cli.client import Server, ServerError, checked
from service.cli.upload import FilePart, Progress, UploadBody


def deploy(
    server: Server,
    name: str,
    program: Path,
    data: list[Path],
    config: str | None,
    replace: bool,
    quiet_stdout: bool = False,
    version: str | None = None,
) -> dict:
    """Uploads and returns the model description; raises ServerError on a refusal.
    With quiet_stdout (--json) the progress goes to stderr, so stdout is only the answer."""
    output.status(
        f"hashing {1 + len(data)} file(s) (sha-256, sent as Content-Digest)", quiet_stdout
    )
    files = [FilePart.of("program", program)] + [FilePart.of("data", p) for p in data]
    fields = {}
    if replace:
        fields["replace"] = "true"
    if config is not None:
        fields["config"] = config
    if version is not None:
        fields["version"] = version
    body = UploadBody(name, files, fields)
    body.progress = Progress(body.length, to_stderr=quiet_stdout)
    headers = {**server.headers, "Content-Type": body.content_type}
    headers["Content-Length"] = str(body.length)
    try:
        with httpx.Client(base_url=server.url, timeout=server.timeout) as client:
            response = client.post("/models", content=iter(body), headers=headers)
    except httpx.TransportError as exc:
        raise ServerError(f"the upload to {server.url} failed: {exc}") from None
    finally:
        if body.progress is not None:
            body.progress.close()
    model = checked(response).json()
    output.status("accepted: the server's ingest checks passed", quiet_stdout)
    return model


def wait_ready(server: Server, name: str, version: str, timeout: float) -> bool:
    """True once /v2/models/{name}/versions/{version}/ready says so, False after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with server.client() as client:
                ready = client.get(f"/v2/models/{name}/versions/{version}/ready")
            if ready.status_code == 200:
                return True
        except httpx.TransportError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
