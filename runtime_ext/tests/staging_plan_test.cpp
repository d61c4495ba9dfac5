// The staging plan: which bindings are bound as they are, which go through a staging buffer, and
// the copies each call needs, decided from facts alone (no memory, no engine).
#include <vector>

#include "check.h"
#include "staging_plan.h"

using namespace ethost_trt;

namespace {

BindingFacts device_buffer(bool is_input, uintptr_t address, size_t nbytes = 1024) {
  BindingFacts f;
  f.is_input = is_input;
  f.address = address;
  f.nbytes = nbytes;
  f.on_device = true;
  return f;
}

BindingFacts host_buffer(bool is_input, uintptr_t address, size_t nbytes = 1024) {
  BindingFacts f = device_buffer(is_input, address, nbytes);
  f.on_device = false;
  return f;
}

size_t copies_counted_for(const StagingPlan& plan, size_t binding) {
  size_t n = 0;
  for (const auto* list : {&plan.before, &plan.after}) {
    for (const auto& c : *list) n += c.counted_binding == binding;
  }
  return n;
}

}  // namespace

TEST(aligned_device_buffers_are_bound_directly) {
  auto plan = plan_staging({device_buffer(true, 0x10000), device_buffer(false, 0x20000)}, false);
  CHECK(plan.placement[0] == Placement::Direct && plan.placement[1] == Placement::Direct);
  CHECK(!plan.bound[0].stage && plan.bound[1].binding == 1);
  CHECK(plan.before.empty() && plan.after.empty());
  CHECK(plan.stage_bytes[0] == 0 && plan.stage_bytes[1] == 0);
}

TEST(an_unaligned_device_input_is_copied_in_on_the_device) {
  auto plan =
      plan_staging({device_buffer(true, 0x10010, 512), device_buffer(false, 0x20000)}, false);
  CHECK(plan.placement[0] == Placement::Staged && plan.reason[0] == StageReason::Unaligned);
  CHECK(plan.bound[0].stage && plan.stage_bytes[0] == 512);
  CHECK(plan.before.size() == 1 && plan.after.empty());
  CHECK(plan.before[0].kind == CopyKind::DeviceToDevice && plan.before[0].nbytes == 512);
  CHECK(!plan.before[0].src.stage && plan.before[0].dst.stage);
}

TEST(an_unaligned_output_is_copied_back_after_the_engine_ran) {
  auto plan = plan_staging({device_buffer(true, 0x10000), device_buffer(false, 0x20040)}, false);
  CHECK(plan.placement[1] == Placement::Staged && plan.before.empty());
  CHECK(plan.after.size() == 1 && plan.after[0].src.stage && !plan.after[0].dst.stage);
  CHECK(plan.after[0].kind == CopyKind::DeviceToDevice);
}

TEST(host_buffers_depend_on_whether_the_device_reads_pageable_memory) {
  std::vector<BindingFacts> facts = {host_buffer(true, 0x10000), host_buffer(false, 0x20000)};
  auto discrete = plan_staging(facts, false);
  CHECK(discrete.reason[0] == StageReason::HostOnDiscreteGpu);
  CHECK(discrete.before.size() == 1 && discrete.before[0].kind == CopyKind::HostToDevice);
  CHECK(discrete.after.size() == 1 && discrete.after[0].kind == CopyKind::DeviceToHost);
  auto integrated = plan_staging(facts, true);
  CHECK(integrated.placement[0] == Placement::Direct &&
        integrated.placement[1] == Placement::Direct);
  CHECK(integrated.before.empty() && integrated.after.empty());
  // Alignment still matters where the device reads host memory.
  auto unaligned = plan_staging({host_buffer(true, 0x10020), host_buffer(false, 0x20000)}, true);
  CHECK(unaligned.placement[0] == Placement::Staged &&
        unaligned.reason[0] == StageReason::Unaligned);
  CHECK(unaligned.before.size() == 1 && unaligned.before[0].kind == CopyKind::HostToDevice);
}

TEST(zero_byte_tensors_get_a_placeholder_and_no_copies) {
  auto plan = plan_staging({device_buffer(true, 0, 0), device_buffer(false, 0x20010, 0)}, false);
  CHECK(plan.placement[0] == Placement::Placeholder && plan.placement[1] == Placement::Placeholder);
  CHECK(plan.bound[0].stage && plan.stage_bytes[0] == kBindingAlignment);
  CHECK(plan.before.empty() && plan.after.empty());
}

TEST(an_in_place_output_shares_its_inputs_binding) {
  // cache (input 0) is updated in place through out (2); x (1) is a plain input.
  BindingFacts cache = device_buffer(true, 0x10010);
  cache.updated_in_place = true;
  BindingFacts out = device_buffer(false, 0x30000);
  out.alias_input = 0;
  auto plan = plan_staging({cache, device_buffer(true, 0x20000), out}, false);
  CHECK(plan.placement[2] == Placement::AliasOfInput);
  CHECK(plan.bound[2].stage == plan.bound[0].stage &&
        plan.bound[2].binding == plan.bound[0].binding);
  // copied in, updated on the stage, copied back; then into the separately passed output
  CHECK(copies_counted_for(plan, 0) == 2 && copies_counted_for(plan, 1) == 0);
  CHECK(copies_counted_for(plan, 2) == 1);
  CHECK(plan.after.size() == 2 && plan.after[0].counted_binding == 0);
  CHECK(plan.after[1].src.stage && plan.after[1].dst.binding == 2);
}

TEST(an_elided_in_place_output_adds_no_copy) {
  BindingFacts cache = device_buffer(true, 0x10000);
  cache.updated_in_place = true;
  BindingFacts out;
  out.present = false;
  out.alias_input = 0;
  auto plan = plan_staging({cache, device_buffer(true, 0x20000), out}, false);
  CHECK(plan.placement[0] == Placement::Direct && plan.placement[2] == Placement::AliasOfInput);
  CHECK(!plan.bound[2].stage && plan.bound[2].binding == 0);
  CHECK(plan.before.empty() && plan.after.empty());
}

TEST(an_empty_binding_list_plans_nothing) {
  auto plan = plan_staging({}, false);
  CHECK(plan.placement.empty() && plan.bound.empty() && plan.before.empty() && plan.after.empty());
}

TEST(a_buffer_without_an_address_gets_a_placeholder_whatever_its_size) {
  // The runner refuses a null buffer that claims bytes before planning; the plan itself never
  // copies from address 0.
  auto plan = plan_staging({device_buffer(true, 0, 64), device_buffer(false, 0x20000)}, false);
  CHECK(plan.placement[0] == Placement::Placeholder && plan.before.empty());
}

TEST(an_unaligned_host_output_is_copied_back_to_the_host) {
  auto plan = plan_staging({host_buffer(true, 0x10000), host_buffer(false, 0x20080, 96)}, true);
  CHECK(plan.placement[0] == Placement::Direct && plan.placement[1] == Placement::Staged);
  CHECK(plan.reason[1] == StageReason::Unaligned && plan.stage_bytes[1] == 96);
  CHECK(plan.after.size() == 1 && plan.after[0].kind == CopyKind::DeviceToHost);
  CHECK(plan.after[0].nbytes == 96);
}

TEST(a_host_in_place_input_is_copied_in_and_back_and_into_its_separate_output) {
  BindingFacts cache = host_buffer(true, 0x10000, 256);
  cache.updated_in_place = true;
  BindingFacts out = host_buffer(false, 0x30000, 256);
  out.alias_input = 0;
  auto plan = plan_staging({cache, out}, false);
  CHECK(plan.placement[0] == Placement::Staged && plan.placement[1] == Placement::AliasOfInput);
  CHECK(plan.before.size() == 1 && plan.before[0].kind == CopyKind::HostToDevice);
  CHECK(plan.after.size() == 2);
  CHECK(plan.after[0].kind == CopyKind::DeviceToHost && plan.after[0].dst.binding == 0);
  CHECK(plan.after[1].kind == CopyKind::DeviceToHost && plan.after[1].src.stage);
  CHECK(plan.after[1].dst.binding == 1 && !plan.after[1].dst.stage);
  CHECK(plan.stage_bytes[1] == 0);  // the output has no stage of its own
}

TEST(an_in_place_output_passed_at_its_inputs_address_adds_no_copy) {
  BindingFacts cache = device_buffer(true, 0x10000);
  cache.updated_in_place = true;
  BindingFacts out = device_buffer(false, 0x10000);
  out.alias_input = 0;
  auto plan = plan_staging({cache, out}, false);
  CHECK(plan.placement[1] == Placement::AliasOfInput && plan.after.empty());
}

TEST(an_in_place_output_of_an_empty_input_adds_no_copy) {
  BindingFacts cache = device_buffer(true, 0, 0);
  cache.updated_in_place = true;
  BindingFacts out = device_buffer(false, 0x30000, 0);
  out.alias_input = 0;
  auto plan = plan_staging({cache, out}, false);
  CHECK(plan.placement[0] == Placement::Placeholder);
  CHECK(plan.bound[1].stage && plan.bound[1].binding == 0);  // bound to the input's placeholder
  CHECK(plan.before.empty() && plan.after.empty());
}
