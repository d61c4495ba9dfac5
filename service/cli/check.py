"""`etrt check`: the ingest of `POST /models`, run on local files with no server.

The upload goes through service.ingest.pipeline.run_ingest itself (name rules, inspection,
external data, the model configuration, each backend's delegate checks and the isolated load
check child), with the settings a server started in this environment would have, so the rule
ids and messages are the server's. One difference, on purpose: TensorRT plans that this host
cannot deserialize (no TensorRT or no CUDA device) are not a refusal here but a third verdict,
"not verifiable", reported with what the blob records, because the point of a check before the
deploy is to learn everything else that is wrong while still on the build machine.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from service import rules
from service.backends.tensorrt.checks import UNVERIFIED_OPTION
from service.cli import exits
from service.cli.plan_head import recorded_plans
from service.cli.targets import Target, Verdict, judge
from service.config import Settings, parse_settings
from service.errors import Problem
from service.ingest.pipeline import IngestRefused, run_ingest

OK, REFUSED, NOT_VERIFIABLE = "ok", "refused", "not_verifiable"
EXIT_CODES = {OK: exits.OK, REFUSED: exits.REFUSED, NOT_VERIFIABLE: exits.NOT_HERE}
UNVERIFIABLE_RULE = rules.TENSORRT_UNVERIFIABLE


@dataclass
class CheckResult:
    verdict: str
    problems: list[Problem]
    model: dict | None = None
    not_verified: list[dict] = field(default_factory=list)
    target: dict | None = None
    target_verdicts: list[Verdict] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def as_json(self) -> dict:
        return {
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "problems": [p.as_dict() for p in self.problems],
            "model": self.model,
            "not_verified": self.not_verified,
            "target": None
            if self.target is None
            else {**self.target, "verdicts": [v.as_dict() for v in self.target_verdicts]},
        }


def _settings(scratch: Path) -> Settings:
    """The settings of a server started here (ETRT_* variables), storing plans it cannot verify
    so that everything else is still checked, the load step included."""
    settings = parse_settings([], os.environ)
    return dataclasses.replace(settings, artifacts=scratch, allow_unverified_plans=True)


def _unverified(model: dict) -> list[dict]:
    """Each delegate the host could not verify, with what its blob records."""
    found = []
    for method in model["methods"]:
        for delegate in method["delegates"]:
            details = delegate["details"]
            if details.get("runnable") is not False:
                continue
            found.append(
                {
                    "method": method["name"],
                    "delegate": delegate["index"],
                    "backend": delegate["backend"],
                    "rule": UNVERIFIABLE_RULE,
                    "reason": details.get("unavailable_reason"),
                    "recorded": {
                        key: details.get(key)
                        for key in (
                            "target_platform",
                            "hardware_compatible",
                            "device_id",
                            "engine_source",
                        )
                    },
                }
            )
    return found


def check_files(
    program: Path,
    data: list[Path],
    config: bytes | None,
    model_name: str,
    target: Target | None,
) -> CheckResult:
    from service.backends.registry import ingest_backends
    from service.cli.local_upload import stage_local
    from service.native_host import import_host

    with tempfile.TemporaryDirectory(prefix="etrt-check-") as scratch:
        scratch = Path(scratch)
        staging = scratch / "upload"
        staging.mkdir()
        upload = stage_local(staging, model_name, program, data, config)
        settings = _settings(scratch / "artifacts")
        backends = ingest_backends(settings)
        import_host(backends.setups)  # as the server does at start: its checks see the backends
        try:
            description = run_ingest(upload, settings, backends)
        except IngestRefused as refused:
            return CheckResult(REFUSED, refused.problems)
        plans = recorded_plans(upload)
    model = description.view("ready" if description.runnable else "unavailable")
    # Plans were stored unverified only because check asks for it: not_verified says so.
    model["warnings"] = [w for w in model["warnings"] if UNVERIFIED_OPTION not in w]
    not_verified = _unverified(model)
    for entry in not_verified:
        entry["plan"] = plans.get((entry["method"], entry["delegate"]))
    result = CheckResult(NOT_VERIFIABLE if not_verified else OK, [], model, not_verified)
    if target is not None:
        _judge_target(result, plans, target)
    return result


def _judge_target(result: CheckResult, plans: dict, target: Target) -> None:
    result.target = target.describe()
    for (method, index), plan in plans.items():
        where = f"method {method!r} delegate {index} ({plan['backend']})"
        result.target_verdicts += judge(where, plan["recorded"], target)
    program = next(f["name"] for f in result.model["files"] if f["role"] == "program")
    for verdict in result.target_verdicts:
        if verdict.verdict == "mismatch":
            result.problems.append(
                Problem(program, verdict.rule, f"{verdict.where} on the target: {verdict.message}")
            )
    if result.problems:
        result.verdict = REFUSED
    elif any(v.verdict == "unknown" for v in result.target_verdicts):
        result.verdict = NOT_VERIFIABLE
