"""The native code under AddressSanitizer and UndefinedBehaviorSanitizer (issue 36).

The libFuzzer targets of the fronts' native readers (runtime_ext/fuzz/: the HTTP head, the
request bodies, the front's take over a connection's bytes, the engine's lane answer) are built
with clang-14 and run for a bounded time each over their committed seed corpus, which holds the
inputs of the faults fuzzing found (regress-*); the C++ unit tests run once more, built with both
sanitizers and any finding fatal. clang-14 and libclang-rt-14-dev come from `.ci/install --test`
(as root); without them these tests fail in CI (CI=true) and are skipped elsewhere.

ETHOST_FUZZ_SECONDS sets each target's run (60 s by default; e.g. 10 for a local check).
docs/contributing-fuzzing.md says how to run the same by hand.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.unit_programs import arena_programs

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CORPUS = REPO / "runtime_ext" / "fuzz" / "corpus"
DICTIONARY = REPO / "runtime_ext" / "fuzz" / "front.dict"
TARGETS = (
    "fuzz_http_head",
    "fuzz_request_bodies",
    "fuzz_front_take",
    "fuzz_lane_answer",
    "fuzz_grpc_take",
)
SECONDS = int(os.environ.get("ETHOST_FUZZ_SECONDS", "60"))
# What a sanitizer, libFuzzer (a crash, a leak, a timeout) or a target's own check prints.
FINDING = re.compile(
    r"ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|invariant broken"
)
UNIT_TESTS = (
    "blob_test",
    "json_test",
    "staging_plan_test",
    "engine_runner_test",
    "backend_test",
    "tensor_io_test",
    "arenas_test",
    "device_inputs_test",
    "plan_reader_test",
    "lane_test",
    "lane_shm_test",
    "batcher_test",
    "front_test",
    "grpc_infer_test",
)


def _clang() -> str:
    path = shutil.which("clang++-14")
    if path is None:
        why = (
            "clang++-14 is not installed: the fuzz targets and the sanitized unit tests need "
            "Debian's clang-14 and libclang-rt-14-dev (`bash .ci/install --test` as root)"
        )
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(why)
        pytest.skip(why)
    return path


def _cmake() -> str:
    path = BIN / "cmake" if (BIN / "cmake").exists() else shutil.which("cmake")
    assert path, "cmake is not installed: run `bash .ci/install --test`"
    return str(path)


def _build(folder: Path, target: str, *defines: str) -> None:
    """Configures `folder` with clang-14 and builds `target` there (incrementally)."""
    configure = subprocess.run(
        [
            _cmake(),
            "-S",
            "runtime_ext",
            "-B",
            str(folder),
            "-G",
            "Ninja",
            f"-DCMAKE_CXX_COMPILER={_clang()}",
            f"-DPython_EXECUTABLE={sys.executable}",
            *defines,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert configure.returncode == 0, configure.stderr[-4000:]
    built = subprocess.run(
        [_cmake(), "--build", str(folder), "--target", target],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert built.returncode == 0, (built.stdout + built.stderr)[-4000:]


@pytest.fixture(scope="module")
def fuzzers() -> Path:
    folder = REPO / "build" / "fuzz"
    _build(folder, "ethost_fuzzers", "-DETHOST_FUZZERS=ON")
    return folder / "fuzz"


def test_every_target_has_a_seed_corpus_with_the_faults_found():
    for target in TARGETS:
        assert len(list((CORPUS / target).iterdir())) >= 12, f"{target}: too few seeds"
    script = REPO / "runtime_ext" / "fuzz" / "make_corpus.py"
    spec = importlib.util.spec_from_file_location("make_corpus", script)
    make_corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_corpus)
    written = {
        target: {p.name: p.read_bytes() for p in (CORPUS / target).iterdir()} for target in TARGETS
    }
    assert written == make_corpus.seeds(), "the corpus is stale: run make_corpus.py and commit it"
    regressions = {p.name for p in CORPUS.glob("*/regress-*")}
    assert {
        "regress-wrapping-byte-count",
        "regress-wrapping-json-count",
        "regress-wrapping-answer-size",
        "regress-zero-dim-output",
    } <= regressions


@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_target_finds_nothing_in_a_bounded_run(target, fuzzers, tmp_path, capsys):
    seeds = CORPUS / target
    found = tmp_path / "found"  # what the run adds; the committed corpus is only read
    found.mkdir()
    command = [
        str(fuzzers / target),
        f"-max_total_time={SECONDS}",
        "-timeout=10",
        "-rss_limit_mb=2048",
        "-print_final_stats=1",
        f"-dict={DICTIONARY}",
        f"-artifact_prefix={tmp_path}/",
        str(found),
        str(seeds),
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=SECONDS + 120)
    log = run.stdout + run.stderr
    executed = re.search(r"stat::number_of_executed_units:\s*(\d+)", log)
    with capsys.disabled():
        print(f"\n{target}: {executed.group(1) if executed else '?'} executions in {SECONDS} s")
    finding = FINDING.search(log)
    assert run.returncode == 0 and finding is None, (
        f"{target} found a fault (input saved under {tmp_path}; rerun it with "
        f"`build/fuzz/fuzz/{target} <file>`):\n{log[-6000:]}"
    )
    assert executed is not None and int(executed.group(1)) > len(list(seeds.iterdir())), log[-2000:]


def test_cpp_unit_tests_pass_under_asan_and_ubsan(tmp_path, programs_dir):
    programs = arena_programs(programs_dir, tmp_path / "arena_programs")
    build = REPO / "build" / "unit-sanitized"
    _build(build, "ethost_unit_tests", "-DETHOST_UNIT_TESTS=ON", "-DETHOST_SANITIZE=ON")
    tested = subprocess.run(
        [str(BIN / "ctest") if (BIN / "ctest").exists() else "ctest", "--test-dir", str(build)]
        + ["--output-on-failure"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={
            **os.environ,
            "ETHOST_TEST_PROGRAMS": str(programs),
            "UBSAN_OPTIONS": "print_stacktrace=1",
        },
    )
    assert tested.returncode == 0, tested.stdout[-6000:]
    assert "100% tests passed" in tested.stdout, tested.stdout[-4000:]
    for name in UNIT_TESTS:
        assert f" {name} " in tested.stdout, f"{name} did not run"
