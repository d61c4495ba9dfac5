"""Child process for corruption tests: loads and runs corrupted programs one after another.

A crash inside ExecuTorch must not take the test process down, so the parent runs this script
and reads the outcome of every case from a JSON-lines log. Before each attempt the case id is
written and flushed, so if the process dies the parent knows which case killed it.

usage: python corruption_child.py CASES_JSON LOG_PATH START_INDEX
CASES_JSON: list of {"id", "pte", "ptds", "inputs": [[shape, dtype], ...]}
"""

import json
import sys

import ethost
import numpy as np


def attempt(case):
    program = ethost.Program(case["pte"], case["ptds"])
    method = program.load_method("forward")
    inputs = [np.ones(shape, dtype) for shape, dtype in case["inputs"]]
    method.execute(inputs)


def main():
    cases = json.loads(open(sys.argv[1]).read())
    start = int(sys.argv[3])
    with open(sys.argv[2], "a") as log:
        for case in cases[start:]:
            log.write(json.dumps({"start": case["id"]}) + "\n")
            log.flush()
            try:
                attempt(case)
                outcome = "ok"
            except (ethost.ExecuTorchError, ethost.InputError) as e:
                outcome = type(e).__name__
            except Exception as e:  # recorded, and judged by the parent
                outcome = f"unexpected {type(e).__name__}: {e}"
            log.write(json.dumps({"done": case["id"], "outcome": outcome}) + "\n")
            log.flush()


if __name__ == "__main__":
    main()
