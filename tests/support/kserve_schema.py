"""KServe's published schema, as its Python package's models carry it (kserve.models, over the
Kubernetes client's models): a manifest is read into those models key by key, so a key no model
declares, a value of the wrong type or a missing required field fails with the manifest's path
to it. No cluster: this is what the API server's schema check would refuse first.

kserve registers protobuf messages of package `inference`, as tritonclient.grpc does, so the two
cannot share a process (see kserve_calls.py): tests call `problems`, which reads the manifests in
a process of its own (this module run as a program, JSON in and out).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

_LIST = re.compile(r"(?:list|List)\[(.+)\]$")
_DICT = re.compile(r"(?:dict\(str, (.+)\)|Dict\[str, (.+)\])$")
_SCALARS = {"str": str, "int": int, "bool": bool, "float": (int, float)}


class SchemaError(ValueError):
    pass


def problems(documents: list[tuple[str, dict]]) -> list[str | None]:
    """For each (model name, parsed manifest): None when it reads as that model, else why not."""
    done = subprocess.run(
        [sys.executable, __file__],
        input=json.dumps(documents),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout)


def _model(name: str):
    import kserve.models
    import kubernetes.client

    for home in (kserve.models, kubernetes.client):
        if hasattr(home, name):
            return getattr(home, name)
    raise SchemaError(f"no model {name} in kserve or kubernetes")


def read(type_name: str, value, path: str = ""):
    """`value` (parsed YAML) as KServe's model `type_name`, e.g. "V1alpha1ServingRuntime"."""
    if type_name == "object":  # int-or-string ports and free-form fields
        return value
    if type_name in _SCALARS:
        if not isinstance(value, _SCALARS[type_name]) or isinstance(value, bool) != (
            type_name == "bool"
        ):
            raise SchemaError(f"{path or '.'}: {value!r} is not {type_name}")
        return value
    if found := _LIST.match(type_name):
        if not isinstance(value, list):
            raise SchemaError(f"{path}: expected a list")
        return [read(found[1], item, f"{path}[{i}]") for i, item in enumerate(value)]
    if found := _DICT.match(type_name):
        if not isinstance(value, dict):
            raise SchemaError(f"{path}: expected a map")
        item_type = found[1] or found[2]
        return {key: read(item_type, item, f"{path}.{key}") for key, item in value.items()}
    model = _model(type_name)
    if not isinstance(value, dict):
        raise SchemaError(f"{path}: expected a {type_name} object")
    attributes = {json_key: attr for attr, json_key in model.attribute_map.items()}
    fields = {}
    for key, item in value.items():
        if key not in attributes:
            raise SchemaError(f"{path}.{key}: {type_name} has no field {key!r}")
        attr = attributes[key]
        fields[attr] = read(model.openapi_types[attr], item, f"{path}.{key}")
    try:
        return model(**fields)
    except (ValueError, TypeError) as exc:  # a required field missing, a value out of its enum
        raise SchemaError(f"{path or '.'}: {type_name}: {exc}") from None


def _main() -> None:
    found = []
    for type_name, document in json.load(sys.stdin):
        try:
            read(type_name, document)
            found.append(None)
        except SchemaError as exc:
            found.append(str(exc))
    print(json.dumps(found))


if __name__ == "__main__":
    _main()
