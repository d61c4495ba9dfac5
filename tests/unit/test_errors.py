"""Refusals as clients show them: the error string carries the problems themselves."""

from service.errors import SHOWN_PROBLEMS, Problem, input_problem, refused


def test_a_refusal_names_its_first_problems_rule_and_message():
    problems = [Problem(f"f{i}.ptd", f"rule.{i}", f"message {i}") for i in range(5)]
    error = refused("upload refused", problems)
    assert error.message == (
        "upload refused: rule.0: message 0; rule.1: message 1; rule.2: message 2; "
        "and 2 more problem(s)"
    )
    assert error.problems == problems and SHOWN_PROBLEMS == 3
    [one] = problems[:1]
    assert refused("upload refused", [one]).message == "upload refused: rule.0: message 0"
    assert refused("upload refused", []).message == "upload refused"


def test_an_input_problem_names_the_input_and_no_file():
    [problem] = input_problem("input_0", "input.shape", "wrong shape").problems
    assert problem.as_dict() == {
        "input": "input_0",
        "rule": "input.shape",
        "message": "wrong shape",
    }
    assert Problem(None, "request.route", "no route").as_dict() == {
        "file": None,
        "rule": "request.route",
        "message": "no route",
    }
