#include "lane.h"

#include "dtypes.h"

#include <chrono>
#include <limits>
#include <vector>

namespace ethost::lane {
namespace {

constexpr uint64_t kAlignment = 256;  // every slot and output in a front's arena

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

double wall_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

uint64_t align_up(uint64_t value) {
  return (value + kAlignment - 1) / kAlignment * kAlignment;
}

// Whether [offset, offset + nbytes) lies in the arena.
bool inside(const ArenaView& arena, uint64_t offset, uint64_t nbytes) {
  return offset <= arena.size && nbytes <= arena.size - offset;
}

// Binds input `input` of dtype `dtype` where it lies; false for anything out of bounds.
bool bind(const WireInput& input, executorch::aten::ScalarType dtype, const ArenaView& arena,
          InputBinding& binding) {
  const Dtype* entry = find_dtype(dtype);
  if (entry == nullptr) return false;
  uint64_t nbytes = entry->size();
  for (size_t d = 0; d < input.ndim; ++d) {
    int64_t extent = input.dims[d];
    if (extent < 0 || extent > std::numeric_limits<int32_t>::max()) return false;
    if (extent != 0 && nbytes > std::numeric_limits<uint64_t>::max() / extent) return false;
    nbytes *= static_cast<uint64_t>(extent);
  }
  if (!inside(arena, input.offset, nbytes) || input.offset % kAlignment != 0) return false;
  binding.is_tensor = true;
  binding.dtype = dtype;
  binding.ndim = input.ndim;
  int32_t stride = 1;
  for (size_t d = input.ndim; d-- > 0;) {
    binding.sizes[d] = static_cast<int32_t>(input.dims[d]);
    binding.dim_order[d] = static_cast<uint8_t>(d);
    binding.strides[d] = stride;
    stride *= binding.sizes[d];
  }
  binding.data = arena.base + input.offset;
  return true;
}

// Rows of a batched request: the same dim 0 on every input, 1 to max_batch; 0 otherwise.
int64_t rows_of(const InferRequest& request, int64_t max_batch) {
  int64_t rows = -1;
  for (size_t i = 0; i < request.input_count; ++i) {
    const WireInput& input = request.inputs[i];
    int64_t leading = input.ndim > 0 ? input.dims[0] : 0;
    if (rows >= 0 && leading != rows) return 0;
    rows = leading;
  }
  return rows >= 1 && rows <= max_batch ? rows : 0;
}

}  // namespace

Lane::Result Lane::serve(const RouteTable* table, const uint8_t* message, size_t size,
                         const ArenaView& arena, int front, std::string& out, bool& fold) {
  uint64_t begun = now_ns();
  Outcome<InferRequest> parsed = read_request(message, size);
  if (table == nullptr || !parsed.ok()) return Result::Declined;
  InferRequest request = parsed.take();
  if (request.generation != table->generation) return Result::Declined;
  auto found = table->routes.find(request.route);
  if (found == table->routes.end()) return Result::Declined;
  const Route& route = *found->second;
  MethodGate& gate = *route.gate;
  if (!gate.open_for_lane(table->inline_ns) || request.input_count != route.inputs.size()) {
    return Result::Declined;
  }
  int64_t rows = 1;
  if (route.max_batch > 0 && (rows = rows_of(request, route.max_batch)) == 0) {
    return Result::Declined;
  }
  std::vector<InputBinding> bindings(request.input_count);
  for (size_t i = 0; i < request.input_count; ++i) {
    if (!bind(request.inputs[i], route.inputs[i], arena, bindings[i])) return Result::Declined;
  }
  // The room, laid out as the Python side lays it out (service/engine/outputs.py): each output
  // asked for at its upper bound, 256-byte aligned, in the method's order.
  size_t output_count = route.most_bytes.size();
  if (request.outputs == 0 || output_count > kMaxOutputs ||
      (output_count < kMaxOutputs && (request.outputs >> output_count) != 0) ||
      !inside(arena, request.room_offset, request.room_size)) {
    return Result::Declined;
  }
  std::vector<OutputDestination> destinations(output_count);
  WireOutput answer[kMaxOutputs];
  size_t answered = 0;
  uint64_t at = request.room_offset, end = request.room_offset + request.room_size;
  for (size_t index = 0; index < output_count; ++index) {
    if ((request.outputs >> index & 1) == 0) continue;
    uint64_t most = route.most_bytes[index];
    uint64_t start = align_up(at);
    if (most == 0 || start > end || most > end - start) return Result::Declined;
    destinations[index] = OutputDestination{arena.base + start, most, true};
    answer[answered].index = static_cast<uint32_t>(index);
    answer[answered].offset = start;
    ++answered;
    at = start + most;
  }
  Outcome<std::vector<OutputBuffer>> ran = Status(Error::Internal, "not run");
  uint64_t bound = 0, executed = 0;
  {
    Claimed claimed(gate.claim());
    if (!claimed) return Result::Declined;
    bound = now_ns();
    ran = claimed.get()->run(bindings, &destinations);
    executed = now_ns();
    gate.observe(claimed.get()->last_run_ns());
  }
  if (!ran.ok()) return Result::Declined;
  std::vector<OutputBuffer> outputs = ran.take();
  if (outputs.size() != output_count) return Result::Declined;
  for (size_t i = 0; i < answered; ++i) {
    const OutputBuffer& output = outputs[answer[i].index];
    if (output.is_none || !output.in_destination || output.shape.size() > kMaxDims) {
      return Result::Declined;
    }
    answer[i].ndim = static_cast<uint32_t>(output.shape.size());
    for (size_t d = 0; d < output.shape.size(); ++d) {
      answer[i].dims[d] = static_cast<int64_t>(output.shape[d]);
    }
  }
  append_answer(out, request.request_id, answer, answered);
  uint64_t done = now_ns();
  fold = log_.add(ServedRecord{found->second, front, rows, done - begun, bound - begun,
                               executed - bound, done - executed, wall_s()}) ||
         fold;
  return Result::Served;
}

}  // namespace ethost::lane
