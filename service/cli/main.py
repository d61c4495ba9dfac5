"""The `etrt` command group: each command parses its options and hands off to its module."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from service.cli import exits, output
from service.cli.client import DEFAULT_URL, Server, ServerError

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
_url = click.option(
    "--url", envvar="ETRT_URL", default=DEFAULT_URL, show_default=True, help="server (ETRT_URL)"
)
_token = click.option(
    "--token", envvar="ETRT_TOKEN", default=None, help="bearer token (ETRT_TOKEN)"
)


def _fail(exc: ServerError, code: int = exits.REFUSED):
    output.error(str(exc))
    output.problems(exc.problems, err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Check, deploy and run ExecuTorch programs on an etrt server."""


@cli.command()
@click.argument("program", type=_FILE)
@click.argument("data", nargs=-1, type=_FILE)
@click.option("--config", "config", type=_FILE, help="model configuration (JSON file)")
@click.option("--name", default="model", show_default=True, help="model name to check")
@click.option("--json", "as_json", is_flag=True, help="print the verdict as JSON")
@click.option("--gpu", help="judge against this GPU: h100, thor, ... or sm_90 / 9.0")
@click.option("--platform", help="judge against this platform, e.g. linux_aarch64")
@click.option("--tensorrt-version", help="judge against this TensorRT release, e.g. 11.1")
def check(program, data, config, name, as_json, gpu, platform, tensorrt_version) -> None:
    """Run the server's ingest rules on PROGRAM and DATA files, here, with no server.

    Exit status: 0 the upload would be accepted, 1 refused, 2 not verifiable here (TensorRT
    plans without TensorRT or a CUDA device, or what a target host would say).
    """
    from service.cli.check import check_files
    from service.cli.targets import parse_target

    target = None
    if gpu or platform or tensorrt_version:
        try:
            target = parse_target(gpu, platform, tensorrt_version)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    result = check_files(program, list(data), config.read_bytes() if config else None, name, target)
    if as_json:
        click.echo(json.dumps(result.as_json(), indent=2))
    else:
        from service.cli.check_report import report

        report(result, program.name)
    sys.exit(result.exit_code)


@cli.command()
@click.argument("name")
@click.argument("program", type=_FILE)
@click.argument("data", nargs=-1, type=_FILE)
@click.option("--config", "config", type=_FILE, help="model configuration (JSON file)")
@click.option("--replace", is_flag=True, help="replace a model of that name atomically")
@click.option(
    "--version",
    default=None,
    help="store it as this model version (default: 1 for a new model, the newest with --replace)",
)
@click.option("--wait", default=120.0, show_default=True, help="seconds to wait for READY")
@click.option("--json", "as_json", is_flag=True, help="print the description as JSON")
@_url
@_token
def deploy(name, program, data, config, replace, version, wait, as_json, url, token) -> None:
    """Upload PROGRAM and DATA as model NAME, wait until it serves, and describe it."""
    from service.cli.deploy import deploy as upload
    from service.cli.deploy import wait_ready

    server = Server(url, token)
    try:
        text = config.read_text() if config else None
        model = upload(
            server, name, program, list(data), text, replace, quiet_stdout=as_json, version=version
        )
    except ServerError as exc:
        _fail(exc)
    version = model.get("version") or version or "1"  # the version the server stored it as
    if model.get("runnable", True) and not wait_ready(server, name, version, wait):
        output.error(f"model {name!r} was stored but is not READY after {wait} s")
        sys.exit(exits.REFUSED)
    if as_json:
        click.echo(json.dumps(model, indent=2))
    else:
        output.description(model)
    sys.exit(exits.OK if model.get("runnable", True) else exits.NOT_HERE)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print the descriptions as JSON")
@_url
@_token
def models(as_json, url, token) -> None:
    """List the server's models and their states."""
    try:
        listed = Server(url, token).request("GET", "/models").json()
    except ServerError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(listed, indent=2))
        return
    if not listed:
        output.line("no models")
    for model in listed:
        methods = ", ".join(m["name"] for m in model.get("methods", []))
        reason = model.get("unavailable_reason") or model.get("error")
        shown = f"{model['name']}\t{model.get('state', '')}\t{methods}"
        output.line(shown + (f"\t{reason}" if reason else ""))


@cli.command()
@click.argument("name")
@_url
@_token
def rm(name, url, token) -> None:
    """Delete model NAME (files and registry entry)."""
    try:
        Server(url, token).request("DELETE", f"/models/{name}")
    except ServerError as exc:
        _fail(exc)
    output.line(f"deleted {name!r}")


@cli.command()
@click.argument("name")
@click.option(
    "--input", "inputs", multiple=True, required=True, help="FILE or NAME=FILE (.npy, .json)"
)
@click.option("--method", default=None, help="method to run (default forward)")
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), help="write outputs here (.npy)"
)
@click.option("--json", "as_json", is_flag=True, help="print the outputs as JSON")
@_url
@_token
def infer(name, inputs, method, out, as_json, url, token) -> None:
    """Run model NAME on the inputs (binary Open Inference Protocol)."""
    from service.cli.infer import infer as run
    from service.cli.infer_report import report

    try:
        outputs = run(Server(url, token), name, list(inputs), method)
    except ServerError as exc:
        _fail(exc)
    except (OSError, ValueError, KeyError) as exc:
        raise click.UsageError(f"--input: {exc}") from None
    report(outputs, out, as_json)


@cli.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve(args) -> None:
    """Run the server: exactly `python -m service ARGS` (see `etrt serve --help`)."""
    from service import __main__ as server

    server.main(list(args))


def main() -> None:
    """Runs the command; every failure ends in one `error: ...` line and a status of EXITS."""
    try:
        code = cli.main(prog_name="etrt", standalone_mode=False)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "etrt"
        output.error(f"{exc.format_message()} (see '{where} --help')")
        code = exits.USAGE
    except click.ClickException as exc:
        output.error(exc.format_message())
        code = exits.REFUSED
    except click.Abort:
        code = exits.INTERRUPTED
    sys.exit(code or exits.OK)
