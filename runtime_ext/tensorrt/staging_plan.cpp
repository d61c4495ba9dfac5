#include "staging_plan.h"

namespace ethost_trt {

StageReason stage_reason(const BindingFacts& b, bool reads_pageable_host) {
  if (!b.on_device && !reads_pageable_host) return StageReason::HostOnDiscreteGpu;
  if (b.address % kBindingAlignment != 0) return StageReason::Unaligned;
  return StageReason::None;
}

StagingPlan plan_staging(const std::vector<BindingFacts>& bindings, bool reads_pageable_host) {
  size_t n = bindings.size();
  StagingPlan plan;
  plan.placement.assign(n, Placement::Direct);
  plan.reason.assign(n, StageReason::None);
  plan.bound.resize(n);
  plan.stage_bytes.assign(n, 0);

  for (size_t i = 0; i < n; ++i) {
    const BindingFacts& b = bindings[i];
    plan.bound[i] = Endpoint{false, i};
    if (b.alias_input >= 0) continue;  // resolved below, once its input is placed
    if (b.nbytes == 0 || b.address == 0) {
      plan.placement[i] = Placement::Placeholder;
      plan.bound[i] = Endpoint{true, i};
      plan.stage_bytes[i] = kBindingAlignment;
      continue;
    }
    plan.reason[i] = stage_reason(b, reads_pageable_host);
    if (plan.reason[i] == StageReason::None) continue;
    plan.placement[i] = Placement::Staged;
    plan.bound[i] = Endpoint{true, i};
    plan.stage_bytes[i] = b.nbytes;
    CopyKind in = copy_kind(b.on_device, true);
    CopyKind out = copy_kind(true, b.on_device);
    if (b.is_input) {
      plan.before.push_back({i, Endpoint{false, i}, Endpoint{true, i}, b.nbytes, in});
      if (b.updated_in_place) {
        plan.after.push_back({i, Endpoint{true, i}, Endpoint{false, i}, b.nbytes, out});
      }
    } else {
      plan.after.push_back({i, Endpoint{true, i}, Endpoint{false, i}, b.nbytes, out});
    }
  }

  // An in-place output shares its input's bound address; when the program also passes the
  // output as a separate buffer, the update is copied there after the input's own copy-back.
  for (size_t i = 0; i < n; ++i) {
    const BindingFacts& b = bindings[i];
    if (b.alias_input < 0) continue;
    size_t in = static_cast<size_t>(b.alias_input);
    plan.placement[i] = Placement::AliasOfInput;
    plan.bound[i] = plan.bound[in];
    bool separate =
        b.present && b.nbytes > 0 && b.address != 0 && b.address != bindings[in].address;
    if (!separate || plan.placement[in] == Placement::Placeholder) continue;
    Endpoint src = plan.bound[in];
    bool src_on_device = src.stage || bindings[in].on_device;
    plan.after.push_back(
        {i, src, Endpoint{false, i}, b.nbytes, copy_kind(src_on_device, b.on_device)});
  }
  return plan;
}

}  // namespace ethost_trt
