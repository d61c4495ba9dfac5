// The runner's CUDA-graph replay (use_cuda_graphs): the first execute of a set of input shapes
// and binding addresses runs plainly, the second is captured on the runner's stream and
// launched, later ones only launch the graph (the provider is not called). A capture never
// overlaps the creation or destruction of an engine or context (engine_lifecycle_*); after 3
// failed captures the runner stays on plain enqueue until the shapes or addresses change.
#include "engine_runner.h"

namespace ethost_trt {

void EngineRunner::drop_graph() {
  if (graph_.exec != 0) memory_->destroy_graph(graph_.exec);
  graph_.exec = 0;
}

GraphReport EngineRunner::graphs() const {
  std::lock_guard<std::mutex> lock(counters_mu_);
  return graph_report_;
}

Status EngineRunner::provider_execute(const ExecuteCall& call) {
  Status executed = context_->execute(call);
  if (!executed.ok()) {
    // What the context holds is unknown now: resend everything next time.
    context_shapes_.clear();
    bound_addresses_.clear();
    bound_scratch_ = nullptr;
    graph_.warmed = false;
  }
  return executed;
}

Status EngineRunner::capture(const ExecuteCall& call) {
  // Never while an engine or context is made or destroyed: put off to a later call instead.
  auto exclusive = try_engine_lifecycle_exclusive();
  if (!exclusive.owns_lock()) return Status(Error::Internal, "busy");
  ETHOST_RETURN_IF_ERROR(memory_->begin_capture(stream_));
  Status executed = context_->execute(call);
  auto graph = memory_->end_capture(stream_);
  if (!executed.ok()) {
    if (graph.ok()) memory_->destroy_graph(graph.value());
    return executed;
  }
  if (!graph.ok()) return graph.take_status();
  graph_.exec = graph.value();
  return Status();
}

Status EngineRunner::enqueue(ExecuteCall& call, const std::vector<Dims>& input_shapes,
                             const std::vector<uintptr_t>& addresses) {
  constexpr uint64_t kMaxFailedCaptures = 3;
  bool eligible = graph_report_.requested && ineligible_.empty();
  if (!eligible) return provider_execute(call);
  bool same = graph_.warmed && input_shapes == graph_.shapes && addresses == graph_.addresses;
  if (same && graph_.exec != 0) {
    ETHOST_RETURN_IF_ERROR(memory_->launch_graph(graph_.exec, stream_));
    std::lock_guard<std::mutex> lock(counters_mu_);
    ++graph_report_.replays;
    return Status();
  }
  if (!same || graph_report_.failed_captures >= kMaxFailedCaptures) {
    // New shapes or addresses (or captures keep failing): a plain enqueue, which also warms
    // the context up for a capture at the next call like it (NVIDIA's recipe).
    if (!same) {
      drop_graph();
      std::lock_guard<std::mutex> lock(counters_mu_);
      graph_report_.replaying = false;
      graph_report_.failed_captures = 0;
      graph_report_.reason.clear();
    }
    ETHOST_RETURN_IF_ERROR(provider_execute(call));
    graph_.shapes = input_shapes;
    graph_.addresses = addresses;
    graph_.warmed = true;
    return Status();
  }
  Status captured = capture(call);
  if (!captured.ok()) {
    if (captured.reason != "busy") {
      std::lock_guard<std::mutex> lock(counters_mu_);
      ++graph_report_.failed_captures;
      if (graph_report_.failed_captures >= kMaxFailedCaptures) {
        graph_report_.replaying = false;
        graph_report_.reason =
            "capture failed " + std::to_string(kMaxFailedCaptures) + " times: " + captured.reason;
      }
    }
    // The context's state after a failed capture is unknown: send it all again.
    call.input_shapes = &input_shapes;
    call.addresses = &addresses;
    return provider_execute(call);
  }
  ETHOST_RETURN_IF_ERROR(memory_->launch_graph(graph_.exec, stream_));
  std::lock_guard<std::mutex> lock(counters_mu_);
  ++graph_report_.captures;
  ++graph_report_.replays;
  graph_report_.replaying = true;
  graph_report_.reason.clear();
  return Status();
}

}  // namespace ethost_trt
