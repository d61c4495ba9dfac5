"""`etrt check`'s verdict for a person: the problems, or the model, and what stays unknown."""

from __future__ import annotations

from service.cli import output
from service.cli.check import NOT_VERIFIABLE, OK, CheckResult

HEADLINES = {
    OK: ("ok: {name} would be accepted", "green"),
    "refused": ("refused: {name} ({count} problem(s); the server would answer 422)", "red"),
    NOT_VERIFIABLE: ("not verifiable here: {name} (everything else passed)", "yellow"),
}


def report(result: CheckResult, name: str) -> None:
    text, style = HEADLINES[result.verdict]
    output.line(text.format(name=name, count=len(result.problems)), style)
    output.problems([p.as_dict() for p in result.problems])
    for entry in result.not_verified:
        where = f"method {entry['method']!r} delegate {entry['delegate']} ({entry['backend']})"
        output.line(f"  {entry['rule']}  {where}: {entry['reason']}", "yellow")
        recorded = ", ".join(f"{k} {v!r}" for k, v in entry["recorded"].items())
        output.line(f"    the blob records: {recorded}")
        plan = entry.get("plan") or {}
        if "plan_bytes" in plan:
            kind = "a TensorRT plan" if plan["tensorrt_plan"] else "not a TensorRT plan"
            output.line(
                f"    the plan: {plan['plan_bytes']} bytes, magic {plan['plan_magic']!r} ({kind})"
            )
        output.line(
            "    not knowable without TensorRT: the TensorRT release and GPU that built the "
            "plan, whether its weights were stripped, its bindings"
        )
    said: dict[tuple, list[str]] = {}  # one line per verdict, naming every delegate it is for
    for verdict in result.target_verdicts:
        if verdict.verdict != "mismatch":
            said.setdefault((verdict.aspect, verdict.verdict, verdict.message), []).append(
                verdict.where
            )
    for (aspect, verdict, message), delegates in said.items():
        style = "green" if verdict == "ok" else "yellow"
        output.line(f"  target {aspect}: {verdict} ({'; '.join(delegates)}): {message}", style)
    if result.model is not None and result.verdict != "refused":
        output.description(result.model)
