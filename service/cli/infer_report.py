"""`etrt infer`'s outputs: saved as .npy, printed as JSON, or summarized for a person."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np

from service.cli import output
from service.cli.infer import Tensor

SHOWN = 16  # values printed per output before it is summarized


def report(outputs: list[Tensor], out: Path | None, as_json: bool) -> None:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for tensor in outputs:
            np.save(out / f"{tensor.name}.npy", tensor.array)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "outputs": [
                        {
                            "name": t.name,
                            "datatype": t.datatype,
                            "shape": list(t.array.shape),
                            "data": t.array.reshape(-1).tolist(),
                        }
                        for t in outputs
                    ]
                }
            )
        )
        return
    for tensor in outputs:
        flat = tensor.array.reshape(-1)
        values = np.array2string(flat[:SHOWN], separator=", ")
        more = f" ... ({flat.size - SHOWN} more)" if flat.size > SHOWN else ""
        saved = f" -> {out / (tensor.name + '.npy')}" if out is not None else ""
        output.line(f"{tensor.name} {tensor.datatype} {list(tensor.array.shape)}{saved}")
        output.line(f"  {values}{more}")
