#include "front_lane.h"

#include "grpc_infer.h"
#include "http_head.h"
#include "wire.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace etrt_front {
namespace {

constexpr std::string_view kV2Models = "/v2/models/";
constexpr std::string_view kInfer = "/infer";
constexpr std::string_view kVersions = "/versions/";

// "/v2/models/{model}[/versions/{version}]/infer" -> model, version; false for any other path.
bool v2_infer_path(std::string_view path, std::string_view& model, std::string_view& version) {
  if (path.substr(0, kV2Models.size()) != kV2Models ||
      path.size() <= kV2Models.size() + kInfer.size() ||
      path.substr(path.size() - kInfer.size()) != kInfer) {
    return false;
  }
  std::string_view middle =
      path.substr(kV2Models.size(), path.size() - kV2Models.size() - kInfer.size());
  size_t slash = middle.find('/');
  if (slash == std::string_view::npos) {
    model = middle;
    version = {};
    return !model.empty();
  }
  model = middle.substr(0, slash);
  if (middle.substr(slash, kVersions.size()) != kVersions) return false;
  version = middle.substr(slash + kVersions.size());
  return !model.empty() && !version.empty() && version.find('/') == std::string_view::npos;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// service/auth.py's reading of "Bearer <token>", compared in constant time.
bool bearer_is(std::string_view authorization, std::string_view token) {
  while (!authorization.empty() && is_space(authorization.front())) authorization.remove_prefix(1);
  while (!authorization.empty() && is_space(authorization.back())) authorization.remove_suffix(1);
  size_t space = authorization.find(' ');
  if (space == std::string_view::npos) return false;
  std::string_view kind = authorization.substr(0, space);
  std::string_view value = authorization.substr(space + 1);
  while (!value.empty() && is_space(value.front())) value.remove_prefix(1);
  if (kind.size() != 6 || value.empty()) return false;
  for (size_t i = 0; i < 6; ++i) {
    char c = kind[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != "bearer"[i]) return false;
  }
  if (value.size() != token.size()) return false;
  unsigned char differs = 0;
  for (size_t i = 0; i < token.size(); ++i) {
    differs |= static_cast<unsigned char>(value[i] ^ token[i]);
  }
  return differs == 0;
}

// Room for a method's outputs at their upper bounds, as service/front/engine_link.py's
// output_bytes.
uint64_t output_room(const MethodEntry& method, int64_t rows) {
  uint64_t total = 0;
  for (const TensorSpec& spec : method.outputs) {
    if (!spec.tensor) {
      total += align_up(8);  // int, float and bool outputs travel as one 8-byte value
      continue;
    }
    if (!spec.known) continue;
    uint64_t count = 1;
    for (size_t d = rows >= 0 && !spec.shape.empty() ? 1 : 0; d < spec.shape.size(); ++d) {
      count *= static_cast<uint64_t>(spec.shape[d]);
    }
    total +=
        align_up(count * info_of(spec.datatype).size * static_cast<uint64_t>(rows >= 0 ? rows : 1));
  }
  return total;
}

// The request's shared memory references, or false where the Python path would not send them
// in a lane request: a region name longer than the message holds (lane_frames.fits), or an
// output in a region that is not a tensor of a protocol datatype (its answer is the Python
// path's to write).
bool region_refs(const GivenRequest& request, const MethodEntry& method,
                 const std::array<const GivenInput*, kMaxInputs>& ordered,
                 std::vector<ethost::lane::WireShmRef>& refs) {
  auto add = [&](uint32_t tensor, bool output, const RegionRef& shm) {
    if (shm.region.size() > 0xFFFF) return false;
    refs.push_back({tensor, output, shm.offset, shm.byte_size, std::string(shm.region)});
    return true;
  };
  for (size_t i = 0; i < method.inputs.size(); ++i) {
    if (ordered[i]->shm.named() && !add(static_cast<uint32_t>(i), false, ordered[i]->shm)) {
      return false;
    }
  }
  for (const GivenOutput& output : request.outputs) {
    if (!output.shm.named()) continue;
    for (size_t o = 0; o < method.outputs.size(); ++o) {
      const TensorSpec& spec = method.outputs[o];
      if (spec.name != output.name) continue;
      if (!spec.tensor || !spec.known || !add(static_cast<uint32_t>(o), true, output.shm)) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

FrontLane::FrontLane(FrontConfig config, std::shared_ptr<Slots> slots, uint8_t* arena,
                     const volatile uint64_t* control)
    : config_(std::move(config)), slots_(std::move(slots)), arena_(arena), control_(control) {}

bool FrontLane::current(const std::shared_ptr<const FrontTable>& table) const {
  // A table older than the engine's, or an engine not serving: the Python path's to handle.
  return table != nullptr && control_[0] == table->generation && control_[2] != 0;
}

FrontLane::Take FrontLane::take_grpc(const uint8_t* data, size_t size, Taken& out) {
  std::shared_ptr<const FrontTable> table = table_;
  if (!current(table)) return Take::Declined;
  GivenRequest request;
  request.inputs.reserve(4);
  if (!read_grpc_infer(data, size, request)) return Take::Declined;
  Arrival arrival;
  arrival.consumed = size;
  return place(std::move(table), request, arrival, out);
}

FrontLane::Take FrontLane::take(const char* data, size_t size, Taken& out) {
  std::shared_ptr<const FrontTable> table = table_;
  if (!current(table)) return Take::Declined;
  RequestHead head;
  if (read_head(data, size, head) != Head::Complete) return Take::Declined;
  // A body still arriving is taken only as a v2 binary one (its tensors then stream into their
  // slot), up to its own limit; every other request only whole.
  bool whole = head.content_length <= size - head.length;
  if (!whole && (!head.has_binary_header || head.content_length > config_.max_streamed_body)) {
    return Take::Declined;
  }
  if (config_.has_token &&
      (!head.has_authorization || !bearer_is(head.authorization, config_.token))) {
    return Take::Declined;
  }
  const char* body = data + head.length;
  size_t body_size = static_cast<size_t>(head.content_length);
  GivenRequest request;
  request.inputs.reserve(4);
  request.available = whole ? body_size : size - head.length;
  if (head.path == kInfer) {
    if (!whole || body_size > config_.max_native_body || !read_native(body, body_size, request)) {
      return Take::Declined;
    }
  } else if (v2_infer_path(head.path, request.model, request.version)) {
    // A binary body goes into its slot whether it arrived in one read or in many.
    uint64_t limit = head.has_binary_header
                         ? std::max(config_.max_v2_body, config_.max_streamed_body)
                         : std::min(config_.max_v2_body, config_.max_json);
    if (body_size > limit ||
        !read_v2(body, body_size, head.has_binary_header ? &head.binary_header : nullptr,
                 config_.max_json, request)) {
      return Take::Declined;
    }
  } else {
    return Take::Declined;
  }
  Arrival arrival;
  arrival.whole = whole;
  arrival.consumed = whole ? head.length + body_size : size;  // all it has, while arriving
  arrival.body = body;
  arrival.body_size = body_size;
  arrival.keep_alive = head.keep_alive;
  return place(std::move(table), request, arrival, out);
}

FrontLane::Take FrontLane::place(std::shared_ptr<const FrontTable> table,
                                 const GivenRequest& request, const Arrival& arrival, Taken& out) {
  bool whole = arrival.whole;
  const ModelEntry* entry = table->entry(request.model, request.version);
  const MethodEntry* method = entry == nullptr ? nullptr : entry->method(request.method);
  std::array<const GivenInput*, kMaxInputs> ordered;
  uint64_t mask = 0;
  if (method == nullptr || !etrt_front::bind(request, *method, ordered) ||
      !output_mask(request, *method, mask)) {
    return Take::Declined;
  }
  // gRPC answers every output in raw_output_contents: one that is not a tensor of a protocol
  // datatype is the Python path's to encode.
  if (request.protocol == Protocol::Grpc) {
    for (size_t o = 0; o < method->outputs.size(); ++o) {
      if ((mask >> o & 1) && (!method->outputs[o].tensor || !method->outputs[o].known)) {
        return Take::Declined;
      }
    }
  }
  size_t count = method->inputs.size();
  int64_t rows =
      entry->max_batch > 0 && count > 0 && ordered[0]->ndim > 0 ? ordered[0]->dims[0] : -1;
  uint64_t inputs_size = 0;
  for (size_t i = 0; i < count; ++i) {
    if (ordered[i]->shm.named()) continue;  // its bytes stay in the client's region
    inputs_size += align_up(ordered[i]->count * ordered[i]->datatype->size);
  }
  // References as service/front/engine_requests.py's _lane_refs lists them: the inputs' in the
  // method's order, then the outputs' in the order asked (the method's).
  std::vector<ethost::lane::WireShmRef> refs;
  if (!region_refs(request, *method, ordered, refs)) return Take::Declined;
  uint64_t capacity = std::min(output_room(*method, rows), slots_->size() / 4);
  if (align_up(inputs_size + capacity) > slots_->size()) return Take::Declined;
  // One arriving body holds its slot for as long as its client takes to send it: together they
  // may hold half the arena, the rest is for requests that are here.
  if (!whole && slots_->in_use() + align_up(inputs_size + capacity) > slots_->size() / 2) {
    return Take::Declined;
  }
  std::optional<Slot> slot = slots_->allocate(inputs_size + capacity);
  if (!slot) return Take::Declined;  // full now: the Python path says when to come back
  ethost::lane::InferRequest message;
  message.route = method->route;
  message.generation = table->generation;
  message.room_offset = slot->offset + inputs_size;
  message.room_size = slot->size - inputs_size;
  message.outputs = mask;
  message.input_count = count;
  uint64_t at = slot->offset;
  std::vector<BodyStream::Segment> segments;
  for (size_t i = 0; i < count; ++i) {
    const GivenInput& input = *ordered[i];
    ethost::lane::WireInput& wire = message.inputs[i];
    wire.ndim = static_cast<uint32_t>(input.ndim);
    std::copy(input.dims.begin(), input.dims.begin() + input.ndim, wire.dims.begin());
    if (input.shm.named()) continue;         // offset 0: named by its reference
    if (!whole && input.bytes != nullptr) {  // its bytes go in as they arrive
      segments.push_back({static_cast<uint64_t>(input.bytes - request.payload),
                          input.count * input.datatype->size, at});
    } else if (!write_values(input, arena_ + at)) {
      slots_->free(*slot);
      return Take::Declined;
    }
    wire.offset = at;
    at += align_up(input.count * input.datatype->size);
  }
  bool any_region = !refs.empty();
  message.refs = std::move(refs);
  message.request_id = next_id_++;
  Pending pending;
  AnswerPlan& plan = pending.plan;
  plan.any_region = any_region;
  plan.protocol = request.protocol;
  plan.model = request.model;
  plan.method = request.method;
  plan.version = entry->version;
  plan.has_id = request.has_id;
  plan.id = request.id;
  plan.keep_alive = arrival.keep_alive;
  plan.binary.assign(method->outputs.size(), false);
  plan.regions.assign(method->outputs.size(), {});
  for (const GivenOutput& output : request.outputs) {
    for (size_t o = 0; o < method->outputs.size(); ++o) {
      if (method->outputs[o].name != output.name) continue;
      plan.binary[o] = output.binary == 1;
      if (output.shm.named()) plan.regions[o] = {std::string(output.shm.region), output.shm.offset};
    }
  }
  pending.table = std::move(table);
  pending.method = method;
  pending.slot = *slot;
  out.id = message.request_id;
  if (whole) {
    out.consumed = arrival.consumed;
    out.complete = true;
    out.message = ethost::lane::write_request(message);
  } else {
    const uint8_t* payload = request.payload;
    size_t json_size = static_cast<size_t>(reinterpret_cast<const char*>(payload) - arrival.body);
    pending.stream =
        std::make_shared<BodyStream>(std::move(segments), arrival.body_size - json_size, message);
    pending.stream->write(arena_, payload, request.available - json_size);
    out.consumed = arrival.consumed;
    out.complete = false;
    out.message.clear();
  }
  pending_.emplace(message.request_id, std::move(pending));
  return Take::Taken;
}

FrontLane::Fill FrontLane::fill(uint64_t id, const char* data, size_t size, size_t& consumed,
                                std::string& message) {
  auto found = pending_.find(id);
  if (found == pending_.end() || found->second.stream == nullptr) return Fill::Unknown;
  BodyStream& stream = *found->second.stream;
  consumed = stream.write(arena_, reinterpret_cast<const uint8_t*>(data), size);
  if (!stream.complete()) return Fill::Arriving;
  message = ethost::lane::write_request(stream.message());
  found->second.stream.reset();
  return Fill::Complete;
}

bool FrontLane::finish(Pending& pending, const std::vector<Output>& outputs,
                       std::string_view default_headers, const Deliver& deliver) {
  if (pending.stream != nullptr) return false;  // no message was sent for it yet
  // An output is in a region exactly where the request put it in one.
  for (const Output& output : outputs) {
    if (output.index >= pending.method->outputs.size() ||
        (output.data == nullptr) != pending.plan.regions[output.index].in_region()) {
      return false;
    }
  }
  AnswerBytes answer;
  if (pending.plan.protocol == Protocol::Grpc) {
    write_grpc_answer(pending.plan, pending.method->outputs, outputs, answer);
  } else {
    write_answer(pending.plan, pending.method->outputs, outputs, default_headers, answer);
  }
  deliver(answer);  // before the slot its outputs lie in is freed
  return true;
}

namespace {

// An HTTP answer: to the connection's socket (what it did not take in `out`), or all in `out`.
FrontLane::Deliver http_delivery(std::string& out, int fd) {
  return [&out, fd](const AnswerBytes& answer) {
    if (fd < 0) {
      out.clear();
      answer.append_to(out);
    } else {
      send_answer(fd, answer, out);
    }
  };
}

}  // namespace

bool FrontLane::answer_lane_to(uint64_t id, const uint8_t* payload, size_t size,
                               std::string_view default_headers, const Deliver& deliver,
                               bool& keep_alive) {
  auto found = pending_.find(id);
  using ethost::lane::kAnswerHead;
  using ethost::lane::kOutputHead;
  if (found == pending_.end() || found->second.stream != nullptr || size < kAnswerHead ||
      payload[0] != ethost::lane::kDoneTag) {
    return false;
  }
  std::vector<Output> outputs(payload[1]);
  size_t at = kAnswerHead;
  for (Output& output : outputs) {
    if (size - at < kOutputHead) return false;
    uint32_t ndim;
    uint64_t offset;
    std::memcpy(&output.index, payload + at, 4);
    std::memcpy(&ndim, payload + at + 4, 4);
    std::memcpy(&offset, payload + at + 8, 8);
    at += kOutputHead;
    if (ndim > kMaxDims || (size - at) / 8 < ndim ||
        output.index >= found->second.method->outputs.size()) {
      return false;
    }
    output.shape.resize(ndim);
    if (ndim > 0) std::memcpy(output.shape.data(), payload + at, 8 * ndim);  // 0-dim: no data()
    at += 8 * ndim;
    // Its bytes must lie in the arena; a product that does not fit in 64 bits is refused before
    // it wraps into a small count.
    uint64_t nbytes = info_of(found->second.method->outputs[output.index].datatype).size;
    for (int64_t d : output.shape) {
      if (d < 0 || __builtin_mul_overflow(nbytes, static_cast<uint64_t>(d), &nbytes)) return false;
    }
    if (offset == ethost::lane::kInRegion) continue;  // data null: written into its region
    if (offset > slots_->size() || nbytes > slots_->size() - offset) return false;
    output.data = arena_ + offset;
  }
  if (!finish(found->second, outputs, default_headers, deliver)) return false;
  keep_alive = found->second.plan.keep_alive;
  slots_->free(found->second.slot);
  pending_.erase(found);
  return true;
}

bool FrontLane::answer_to(uint64_t id, std::string_view version, const std::vector<Output>& outputs,
                          std::string_view default_headers, const Deliver& deliver,
                          bool& keep_alive) {
  auto found = pending_.find(id);
  if (found == pending_.end()) return false;
  found->second.plan.version = std::string(version);
  if (!finish(found->second, outputs, default_headers, deliver)) return false;
  keep_alive = found->second.plan.keep_alive;
  slots_->free(found->second.slot);
  pending_.erase(found);
  return true;
}

bool FrontLane::answer_lane(uint64_t id, const uint8_t* payload, size_t size,
                            std::string_view default_headers, std::string& out, bool& keep_alive,
                            int fd) {
  return answer_lane_to(id, payload, size, default_headers, http_delivery(out, fd), keep_alive);
}

bool FrontLane::answer(uint64_t id, std::string_view version, const std::vector<Output>& outputs,
                       std::string_view default_headers, std::string& out, bool& keep_alive,
                       int fd) {
  return answer_to(id, version, outputs, default_headers, http_delivery(out, fd), keep_alive);
}

bool FrontLane::release(uint64_t id, Protocol& protocol, bool& keep_alive) {
  auto found = pending_.find(id);
  if (found == pending_.end()) return false;
  protocol = found->second.plan.protocol;
  keep_alive = found->second.plan.keep_alive;
  slots_->free(found->second.slot);
  pending_.erase(found);
  return true;
}

int FrontLane::output_index(uint64_t id, std::string_view name) const {
  auto found = pending_.find(id);
  if (found == pending_.end()) return -1;
  const auto& outputs = found->second.method->outputs;
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (outputs[o].name == name) return static_cast<int>(o);
  }
  return -1;
}

}  // namespace etrt_front
