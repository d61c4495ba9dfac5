"""How many instances a method gets (service/dataplane/instances.py): what is set wins, else a
small CPU program gets one per front and anything larger, or holding device memory, the base."""

from service.config import Settings
from service.dataplane import instances
from service.dataplane.instances import BASE, InstancePlan, plan_for
from service.dataplane.model_pool import ModelPool
from service.native_host import import_host
from service.store.records import ModelDescription, StoredFile, StoredModel
from support.program_fixtures import counter_program  # noqa: F401

SMALL = {"planned_buffers": [{"size": 272, "device": "cpu"}], "delegates": []}


def test_a_set_count_wins_over_the_automatic_one():
    settings = Settings(workers=8, instances_per_model=3)
    assert plan_for(None, settings).first == 3 and plan_for(None, settings).more(1, SMALL) == 0
    assert plan_for(5, settings).first == 5 and plan_for(5, Settings(workers=8)).first == 5


def test_a_small_cpu_program_gets_one_instance_per_front():
    plan = plan_for(None, Settings(workers=8), {"TensorRTBackend"})
    assert plan.first == BASE and plan.more(4096, SMALL) == 8 - BASE
    assert plan_for(None, Settings(workers=1)).more(4096, SMALL) == 0  # never below the base


def test_a_large_or_device_holding_program_keeps_the_base():
    plan = plan_for(None, Settings(workers=8), {"TensorRTBackend"})
    big_planned = {
        "planned_buffers": [{"size": instances.SMALL_PLANNED_BYTES + 1, "device": "cpu"}]
    }
    on_device = {"planned_buffers": [{"size": 256, "device": "cuda"}], "delegates": []}
    gpu_delegate = {**SMALL, "delegates": ["TensorRTBackend"]}
    assert plan.more(instances.SMALL_PROGRAM_BYTES + 1, SMALL) == 0
    for meta in (big_planned, on_device, gpu_delegate):
        assert plan.more(4096, meta) == 0


def test_a_pool_loads_what_the_plan_says(counter_program):  # noqa: F811
    description = ModelDescription("c", (StoredFile("program.pte", "program", 0, ""),), ())
    stored = StoredModel("counter", counter_program.pte.parent, description)
    grown = ModelPool(stored, import_host(), InstancePlan(None, 6))
    assert grown.instance_count("forward") == 6
    assert ModelPool(stored, import_host(), InstancePlan(3, 6)).instance_count("forward") == 3
