"""The published names of a method's tensors: `input_<i>` / `output_<i>`.

ExecuTorch programs do not keep the argument names of the exported function, so every input and
output gets a positional name: stable across re-exports of the same signature and across
protocols. A program that does carry a (unique) tensor name keeps that one. Ingest checks a
configuration's tensor names (warmup inputs) with the same rule the dataplane serves them by.
"""

from __future__ import annotations

import re

_NAME = re.compile(r"\('([A-Za-z_][A-Za-z0-9_.]*)'\)")


def tensor_names(specs: list[dict], role: str) -> list[str]:
    """`role`: "input" or "output"; `specs` as the host's method meta lists them."""
    found = [_NAME.search(spec.get("name", "")) for spec in specs]
    names = [m.group(1) if m else f"{role}_{i}" for i, m in enumerate(found)]
    if len(set(names)) != len(names):
        return [f"{role}_{i}" for i in range(len(specs))]
    return names
