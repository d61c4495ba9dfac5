"""The programs the C++ unit tests read (ETHOST_TEST_PROGRAMS), shared by the plain CTest run
(tests/unit/test_native_checks.py) and the sanitized one (tests/unit/test_fuzz_targets.py)."""

from pathlib import Path


def arena_programs(programs_dir: Path, folder: Path) -> Path:
    """The programs arenas_test, device_inputs_test and plan_reader_test read: host-planned,
    CUDA-planned, and with inputs left out of planning (on the CPU, and TensorRT-delegated)."""
    from support.programs import export_linear_relu
    from support.trt_models import DEVICE_PLANNED_SET
    from support.trt_programs import export_trt_program

    folder.mkdir(exist_ok=True)
    (folder / "cpu.pte").symlink_to(export_linear_relu(programs_dir, alignment=256).pte)
    device = export_trt_program(programs_dir, *DEVICE_PLANNED_SET[0], device_planned=True)
    (folder / "device.pte").symlink_to(device.pte)
    unplanned = export_linear_relu(programs_dir, alignment=256, planned_inputs=False)
    (folder / "unplanned.pte").symlink_to(unplanned.pte)
    trt = export_trt_program(programs_dir, "add", 256, planned_inputs=False)
    (folder / "trt_unplanned.pte").symlink_to(trt.pte)
    return folder
