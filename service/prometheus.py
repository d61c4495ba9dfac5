"""Prometheus' text exposition format (0.0.4): metric families and their samples.

The format is small and stable, so it is written here instead of pulling in a client library.
A base module, so that the dataplane's metrics and each backend's own families (rendered with
them) import it downward.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DURATION_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def _series(name: str, names: tuple[str, ...], values: tuple[str, ...]) -> str:
    if not names:
        return name
    pairs = ",".join(f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values))
    return f"{name}{{{pairs}}}"


class Family:
    """One metric name: its HELP and TYPE lines and one sample per combination of label values.
    Subclasses name the TYPE in `kind`."""

    def __init__(self, name: str, help_text: str, label_names: tuple[str, ...] = ()):
        self.name = name
        self.help = help_text
        self.label_names = label_names
        self.samples: dict[tuple[str, ...], float] = {}

    def add(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        self.samples[labels] = self.samples.get(labels, 0.0) + amount

    def remove(self, label: str, value: str) -> None:
        at = self.label_names.index(label)
        self.samples = {k: v for k, v in self.samples.items() if k[at] != value}

    def _lines(self) -> list[str]:
        return [
            f"{_series(self.name, self.label_names, labels)} {format_value(value)}"
            for labels, value in sorted(self.samples.items())
        ]

    def render(self) -> list[str]:
        return [
            f"# HELP {self.name} {_escape_help(self.help)}",
            f"# TYPE {self.name} {self.kind}",
            *self._lines(),
        ]


class Counter(Family):
    kind = "counter"


class Gauge(Family):
    kind = "gauge"


class Histogram(Family):
    """Cumulative buckets, sum and count per label combination, as Prometheus expects them."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        help_text: str,
        label_names: tuple[str, ...],
        buckets: tuple[float, ...] = DURATION_BUCKETS,
    ):
        super().__init__(name, help_text, label_names)
        self.buckets = tuple(sorted(buckets))
        self.samples: dict[tuple[str, ...], list[float]] = {}

    def _state(self, labels: tuple[str, ...]) -> list[float]:
        # Per bucket (non-cumulative), then +Inf, sum and count.
        state = self.samples.get(labels)
        if state is None:
            state = self.samples[labels] = [0.0] * (len(self.buckets) + 3)
        return state

    def observe(self, labels: tuple[str, ...], value: float, count: int = 1) -> None:
        """`count` observations of `value`."""
        state = self._state(labels)
        state[bisect.bisect_left(self.buckets, value)] += count  # the first bound >= value
        state[-2] += value * count
        state[-1] += count

    def observe_many(self, labels: tuple[str, ...], values: np.ndarray) -> None:
        """`values` float64, bucketed at once: the engine's lane counts requests by the
        hundred thousand a second (service/dataplane/ledger.py)."""
        if not len(values):
            return
        state = self._state(labels)
        # side="left": the first bound >= value, as observe's bisect_left
        found = np.bincount(
            np.searchsorted(self.buckets, values, side="left"), minlength=len(self.buckets) + 1
        )
        for index in np.flatnonzero(found):
            state[index] += int(found[index])
        state[-2] += math.fsum(values.tolist())
        state[-1] += len(values)

    def _lines(self) -> list[str]:
        names = (*self.label_names, "le")
        lines = []
        for labels, state in sorted(self.samples.items()):
            cumulative = 0.0
            for bound, count in zip((*self.buckets, math.inf), state):
                cumulative += count
                bucket = _series(self.name + "_bucket", names, (*labels, format_value(bound)))
                lines.append(f"{bucket} {format_value(cumulative)}")
            lines.append(
                f"{_series(self.name + '_sum', self.label_names, labels)} {format_value(state[-2])}"
            )
            lines.append(
                f"{_series(self.name + '_count', self.label_names, labels)} "
                f"{format_value(state[-1])}"
            )
        return lines
