"""The rule catalogue (service/rules.py) is the one list of rule ids: the table of
docs/ingest-rules.md is it, every rule-like string in service/ is in it, and its answers are the
protocols' own.

`python tests/unit/test_rules.py` writes the docs' table from the catalogue.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from service import errors, rules  # noqa: E402

RULES_PAGE = ROOT / "docs" / "ingest-rules.md"
# Every page a reader may meet a rule id on.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BEGIN = "<!-- rule catalogue: generated from service/rules.py by tests/unit/test_rules.py -->"
END = "<!-- end of the rule catalogue -->"
RULE_LIKE = re.compile(r"[a-z][a-z_]*\.[a-z][a-z_0-9]*")
# Strings of a rule family's spelling that are no rule ids.
NOT_RULES = {"program.pte", "model.pte", "server.lock", "server.py"}


def families() -> set[str]:
    return {rule_id.split(".")[0] for rule_id in rules.CATALOGUE}


def rules_table() -> str:
    lines = [
        BEGIN,
        "",
        "| rule | meaning | HTTP (native API / `/v2`) | gRPC |",
        "|---|---|---|---|",
    ]
    for rule in rules.CATALOGUE.values():
        answer = rule.answer
        http = str(answer.http) if answer.http == answer.v2 else f"{answer.http} / {answer.v2}"
        lines.append(f"| `{rule.id}` | {rule.meaning} | {http} | {answer.grpc or '-'} |")
    return "\n".join([*lines, "", END])


def _generated_block(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def rule_like_literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and RULE_LIKE.fullmatch(node.value)
        and node.value.split(".")[0] in families()
    } - NOT_RULES


def test_the_docs_table_is_the_catalogue():
    assert _generated_block(RULES_PAGE.read_text()) == rules_table(), (
        "docs/ingest-rules.md's rule table differs from service/rules.py: "
        "run python tests/unit/test_rules.py"
    )


def test_every_rule_the_docs_name_is_declared():
    for page in PAGES:
        named = set(re.findall(r"`([a-z][a-z_]*\.[a-z][a-z_0-9]*)`", page.read_text()))
        named = {n for n in named if n.split(".")[0] in families()} - NOT_RULES
        assert named - set(rules.CATALOGUE) == set(), page.name


def test_every_rule_like_literal_in_service_is_declared():
    undeclared = {
        f"{path.relative_to(ROOT)}: {literal}"
        for path in sorted((ROOT / "service").rglob("*.py"))
        for literal in rule_like_literals(path)
        if literal not in rules.CATALOGUE
    }
    assert undeclared == set()


def test_the_literal_check_finds_an_undeclared_rule(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('RULE = "input.made_up"\nFILE = "program.pte"\nKEY = "grpc.so_reuseport"\n')
    assert rule_like_literals(module) == {"input.made_up"}


def test_answers_are_the_protocols_own():
    """Each answer's statuses are what the HTTP protocols and gRPC send for its error class."""
    from service.front.protocols import http_errors
    from service.front.protocols.v2_grpc import binding

    for rule in rules.CATALOGUE.values():
        answer = rule.answer
        if not answer.error:
            continue
        error = getattr(errors, answer.error)("x")
        assert http_errors.service_error_response(error).status_code == answer.http, rule.id
        v2 = http_errors.service_error_response(error, invalid_status=400).status_code
        assert v2 == answer.v2, rule.id
        codes = [code for kind, code in binding.STATUS.items() if isinstance(error, kind)]
        assert codes[0].name == answer.grpc, rule.id


def test_a_rule_is_declared_once():
    import pytest

    with pytest.raises(ValueError, match="declared twice"):
        rules._rule("request.route", rules.NO_ROUTE, "again")


if __name__ == "__main__":
    text = RULES_PAGE.read_text()
    RULES_PAGE.write_text(text.replace(_generated_block(text), rules_table()))
