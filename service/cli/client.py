"""The HTTP side of the client commands: base URL, token, and error answers read once.

Every error answer of the server has one shape, {"error", "problems"}, so one reader turns any
of them into the message and problem list the commands print.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"


class ServerError(Exception):
    """A non-2xx answer (or no answer at all), with the server's message and problems."""

    def __init__(self, message: str, status: int | None = None, problems: list | None = None):
        super().__init__(message)
        self.status = status
        self.problems = problems or []


@dataclass
class Server:
    url: str
    token: str | None = None
    timeout: float = 600.0
    headers: dict = field(init=False)

    def __post_init__(self):
        self.url = self.url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=self.timeout)

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        try:
            with self.client() as client:
                response = client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServerError(f"cannot reach the server at {self.url}: {exc}") from None
        return checked(response)


def checked(response: httpx.Response) -> httpx.Response:
    if response.is_success:
        return response
    try:
        body = response.json()
    except ValueError:
        body = {"error": response.text}
    message = body.get("error") if isinstance(body, dict) else None
    problems = body.get("problems") if isinstance(body, dict) else None
    raise ServerError(
        f"{response.status_code}: {message or response.reason_phrase}",
        response.status_code,
        problems if isinstance(problems, list) else [],
    )
