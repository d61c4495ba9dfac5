// Where each engine binding's address comes from, and which copies a call needs. Pure: it takes
// facts about the caller's buffers and returns decisions, so every rule is testable on its own.
//
// TensorRT needs every bound address on a 256-byte boundary and does not check it: an unaligned
// output faults, an unaligned matmul input silently computes garbage. So a buffer is bound as it
// is only when the device can read it and it sits on the boundary; anything else goes through a
// per-binding device buffer of our own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memory.h"

namespace ethost_trt {

constexpr uintptr_t kBindingAlignment = 256;

enum class Placement {
  Direct,       // the caller's buffer is bound as it is
  Staged,       // bound to the binding's staging buffer, with copies in and/or out
  Placeholder,  // zero bytes: bound to the staging buffer so the address is valid, no copies
  AliasOfInput  // an in-place output: bound wherever its input is bound
};

enum class StageReason { None, Unaligned, HostOnDiscreteGpu };

struct BindingFacts {
  bool is_input = false;
  uintptr_t address = 0;
  size_t nbytes = 0;
  bool on_device = false;
  // False for an aliased output the exporter elided from the delegate's arguments.
  bool present = true;
  // For an output that updates an input in place: the engine index of that input, else -1.
  int alias_input = -1;
  // For an input: true when some output updates it in place.
  bool updated_in_place = false;
};

struct Endpoint {
  bool stage = false;  // the binding's staging buffer, else the caller's buffer
  size_t binding = 0;
};

struct PlannedCopy {
  size_t counted_binding;  // whose staging counter this copy adds to
  Endpoint src;
  Endpoint dst;
  size_t nbytes;
  CopyKind kind;
};

struct StagingPlan {
  std::vector<Placement> placement;
  std::vector<StageReason> reason;
  std::vector<Endpoint> bound;      // the address each binding gets
  std::vector<size_t> stage_bytes;  // staging buffer size needed, 0 = none
  std::vector<PlannedCopy> before;  // before enqueue, in order
  std::vector<PlannedCopy> after;   // after enqueue, in order
};

StageReason stage_reason(const BindingFacts& b, bool reads_pageable_host);
StagingPlan plan_staging(const std::vector<BindingFacts>& bindings, bool reads_pageable_host);

}  // namespace ethost_trt
