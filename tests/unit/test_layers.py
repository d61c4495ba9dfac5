"""service/ read as a stack: every import (lazy ones in functions included) points down it, and
no module reaches itself through its imports.

A module may import its own layer or any layer below; the three protocol packages are siblings
that share only what the layer below them holds. A module whose layer is not declared here fails
the test, so a new one takes its place in the stack on purpose.
"""

from __future__ import annotations

import ast
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[2] / "service"

# Top first; a module's layer is that of the longest prefix naming it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "processes and the etrt command",
        (
            "service.__main__",
            "service.supervisor",
            "service.front",
            "service.cli",
            "service.healthcheck",
            # The Ray Serve application: the server's app (service.front.app) over an embedded
            # engine, in a Serve replica.
            "service.ray_serve",
        ),
    ),
    (
        "protocols",
        (
            "service.front.protocols.native",
            "service.front.protocols.v2_rest",
            "service.front.protocols.v2_grpc",
        ),
    ),
    ("shared by the protocols", ("service.front.protocols",)),
    # The engine process serves the fronts on an embedded engine (service/embedded/), the public
    # API over the dataplane: the process wiring above it, the library below.
    ("engine process", ("service.engine",)),
    ("embedded engine", ("service.embedded",)),
    # The front-engine contract names the dataplane's records (the model table, staged uploads),
    # and the handshake states its version: both sit with the dataplane, not in the base.
    (
        "dataplane",
        (
            "service.dataplane",
            "service.shm",
            "service.shared.contract",
            "service.shared.handshake",
        ),
    ),
    ("backends", ("service.backends",)),
    ("ingest", ("service.ingest",)),
    ("store", ("service.store",)),
    ("model configuration", ("service.model_config",)),
    (
        "base",
        (
            "service",
            "service.auth",
            "service.config",
            "service.cuda",
            "service.dtypes",
            "service.errors",
            "service.inline_policy",
            "service.shared",
            "service.native_host",
            "service.oip",
            "service.prometheus",
            "service.rules",
            "service.tensor_names",
        ),
    ),
)
# Packages of one layer that must not import each other.
SIBLINGS = (
    "service.front.protocols.native",
    "service.front.protocols.v2_rest",
    "service.front.protocols.v2_grpc",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SERVICE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in SERVICE.rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every service module `name` imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            # `from package import module` imports the module
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        found.update(t for t in targets if t == "service" or t.startswith("service."))
    found.discard(name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _prefix(name: str) -> tuple[int, str] | None:
    best = None
    for depth, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > len(best[1]):
                    best = (depth, prefix)
    return best


def _layer(name: str) -> int:
    found = _prefix(name)
    assert found is not None, f"{name} has no layer in LAYERS"
    return found[0]


def _sibling(name: str) -> str | None:
    return next((s for s in SIBLINGS if name == s or name.startswith(s + ".")), None)


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            if _layer(target) < _layer(source):
                wrong.append(
                    f"{source} ({LAYERS[_layer(source)][0]}) imports {target} "
                    f"({LAYERS[_layer(target)][0]}, above it)"
                )
            elif _sibling(source) and _sibling(target) and _sibling(source) != _sibling(target):
                wrong.append(f"{source} imports its sibling protocol's {target}")
    return wrong


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer():
    assert [name for name in _graph() if _prefix(name) is None] == []


def test_no_import_points_up_the_stack():
    assert upward_arrows(_graph()) == []


def test_no_import_circle():
    assert circles(_graph()) == []


def test_the_checks_see_an_upward_arrow_and_a_circle():
    """The two checks on a graph made to break them: they can fail."""
    graph = {
        "service.ingest.pipeline": {"service.backends.registry"},
        "service.backends.registry": {"service.backends.tensorrt.checks"},
        "service.backends.tensorrt.checks": {"service.ingest.pipeline"},
        "service.front.protocols.http_errors": {"service.front.protocols.native.schema"},
        "service.front.protocols.native.schema": {"service.front.protocols.v2_rest.schema"},
    }
    assert len(upward_arrows(graph)) == 3
    assert circles(graph) == [
        [
            "service.backends.registry",
            "service.backends.tensorrt.checks",
            "service.ingest.pipeline",
        ]
    ]


def test_lazy_imports_count(tmp_path):
    """An import inside a function is an arrow too: it is where circles hide."""
    module = tmp_path / "service" / "ingest" / "x.py"
    module.parent.mkdir(parents=True)
    module.write_text("def f():\n    from service.backends import registry\n")
    assert _imports("service.ingest.x", module, {"service.backends.registry"}) == {
        "service.backends.registry"
    }


def _rooms(graph: dict[str, set[str]]) -> list[str]:
    """Imports between the two processes' rooms: the engine process imports nothing of the
    fronts (service/front/, service/front/protocols/), and a front nothing of the engine's wiring
    (service/engine/); what they share is in service/shared/ (docs/architecture-contract.md)."""
    forbidden = {
        "service.engine": ("service.front",),
        "service.front": ("service.engine",),
        # The protocols are the front's lower floor: they know nothing of its process wiring.
        "service.front.protocols": ("service.engine", "service.front"),
    }
    allowed = {"service.front.protocols": ("service.front.protocols",)}

    def under(name: str, prefix: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    wrong = []
    for source, targets in sorted(graph.items()):
        for room, others in forbidden.items():
            if under(source, room):
                wrong += [
                    f"{source} imports {target}"
                    for target in sorted(targets)
                    if any(under(target, o) for o in others)
                    and not any(under(target, a) for a in allowed.get(room, ()))
                ]
    return wrong


def test_each_process_imports_nothing_of_the_others_room():
    assert _rooms(_graph()) == []
    made_wrong = {
        "service.engine.calls": {"service.front.engine_client"},
        "service.front.protocols.bodies": {
            "service.front.app",
            "service.front.protocols.json_spans",
        },
    }
    assert _rooms(made_wrong) == [
        "service.engine.calls imports service.front.engine_client",
        "service.front.protocols.bodies imports service.front.app",
    ]
