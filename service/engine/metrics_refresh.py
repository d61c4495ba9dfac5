"""Keeps the /metrics page the fronts may answer from (service/shared/metrics_snapshot.py) fresh
while someone scrapes, and idle otherwise.

Every page rendered for a front's MetricsText call is published. From then on, for `keep_s`, the
page is rendered again every half of the age a front may serve (`--metrics-max-age-ms`), so a
front under load finds one young enough; each scrape a front answers from the snapshot notes it
(MetricsScraped, at most once a second per front) and extends that. A server nobody scrapes
renders nothing; one scraped renders about 0.4 ms of engine time per refresh.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from service.shared import metrics_snapshot

log = logging.getLogger(__name__)

# How long a scrape keeps the page refreshed: longer than the scrape intervals in use
# (Prometheus' default is 15 s, one minute is common).
KEEP_S = 120.0


class MetricsRefresh:
    def __init__(
        self,
        render: Callable[[], Awaitable[str]],
        writer: metrics_snapshot.Writer | None,
        max_age_s: float,
    ):
        self._render = render
        self._writer = writer
        self._every_s = max_age_s / 2
        self._until = 0.0
        self._task: asyncio.Task | None = None

    async def page(self) -> str:
        """A page rendered now (a front's call), published for the fronts."""
        begun = time.monotonic()
        text = await self._render()
        if self._every_s > 0:
            self._writer.write(text, begun)
            self.scraped()
        return text

    def scraped(self) -> None:
        """A scrape was answered: keep the page fresh for a while."""
        if self._every_s <= 0:
            return
        self._until = time.monotonic() + KEEP_S
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._refresh())

    async def _refresh(self) -> None:
        while time.monotonic() < self._until:
            await asyncio.sleep(self._every_s)
            begun = time.monotonic()
            try:
                text = await self._render()
            except Exception:  # the page's error shows on the next live scrape; keep serving
                log.exception("the /metrics page could not be rendered")
                continue
            # Stamped when rendering began: the counters are at least that fresh.
            self._writer.write(text, begun)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
