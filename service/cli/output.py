"""How etrt prints: rich on a terminal, plain lines otherwise (logs, CI, pipes).

Every command prints through here so that piped output never carries colour codes or
redrawn lines, and errors go to stderr.
"""

from __future__ import annotations

import sys

import click


def is_tty() -> bool:
    return sys.stdout.isatty()


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def line(text: str, style: str | None = None) -> None:
    if is_tty() and style:
        from rich.markup import escape

        _console().print(f"[{style}]{escape(text)}[/{style}]")
    else:
        click.echo(text)


def status(text: str, to_stderr: bool) -> None:
    """What a command is doing; on stderr when stdout carries its JSON answer."""
    if to_stderr:
        click.echo(text, err=True)
    else:
        line(text)


def error(text: str) -> None:
    click.echo(f"error: {text}", err=True)


def problems(problems: list[dict], err: bool = False) -> None:
    """One line per problem; with err, on stderr beside the error line (a failed command)."""
    for problem in problems:
        where = problem.get("input") or problem.get("file")
        text = f"  {problem['rule']}  {f'{where}: ' if where else ''}{problem['message']}"
        if err:
            click.echo(text, err=True)
        else:
            line(text, "red")


def _spec(spec: dict) -> str:
    if "dtype" not in spec:
        return f"{spec['name']} ({spec.get('tag', '?')})"
    dynamic = " dynamic" if spec.get("dynamic") else ""
    return f"{spec['name']} {spec['dtype']} {spec['shape']}{dynamic}"


def description(model: dict) -> None:
    """A model description (the API's), as a few lines a person reads."""
    state = model.get("state", "")
    line(f"model {model['name']!r}: {state}", "green" if state == "ready" else "yellow")
    for stored in model.get("files", []):
        size = f"{stored['bytes']} bytes, sha256 {stored['sha256']}"
        line(f"  {stored['role']} {stored['name']} ({size})")
    for method in model.get("methods", []):
        delegates = ", ".join(d["backend"] for d in method.get("delegates", [])) or "none"
        line(f"  method {method['name']!r} (delegates: {delegates})")
        for spec in method.get("inputs", []):
            line(f"    in  {_spec(spec)}")
        for spec in method.get("outputs", []):
            line(f"    out {_spec(spec)}")
    for warning in model.get("warnings", []):
        line(f"  warning: {warning}", "yellow")
    if model.get("unavailable_reason"):
        line(f"  not runnable here: {model['unavailable_reason']}", "yellow")
