// The execute of a batch the lane's batcher formed (batcher.h): its inputs gathered, one run,
// each request its own rows, and the halving of a batch the host refused as the inputs' fault.
#include "batcher.h"
#include "clock.h"
#include "dtypes.h"
#include "window_copies.h"

#include <cstring>
#include <string>
#include <vector>

namespace ethost::lane {
namespace {

using limits::align_up;

// The host's refusal of the inputs (service/dataplane/kernel_errors.py's is_input_fault, which
// reads the same Status once it is a Python error): a kernel's InvalidArgument, or a delegate
// whose graph cannot take the inputs' shapes. Nothing ran, so the batch may run again in parts.
bool input_fault(const Status& status) {
  return status.kind == Status::Kind::Runtime &&
         (status.code == Error::InvalidArgument ||
          status.reason.find("Propagating input shapes failed") != std::string::npos);
}

// A run of a batch's requests (all of it, or a half being run again).
struct Entries {
  std::unique_ptr<BatchEntry>* first = nullptr;
  size_t count = 0;
  size_t size() const { return count; }
  std::unique_ptr<BatchEntry>* begin() const { return first; }
  std::unique_ptr<BatchEntry>* end() const { return first + count; }
  const std::unique_ptr<BatchEntry>& front() const { return *first; }
  Entries head(size_t n) const { return {first, n}; }
  Entries after(size_t n) const { return {first + n, count - n}; }
};

struct Ran {
  Outcome<std::vector<OutputBuffer>> outputs;
  const uint8_t* room = nullptr;    // this thread's scratch
  std::vector<uint64_t> output_at;  // where in it each output was written
  uint64_t input_ns = 0, infer_ns = 0;
};

// Executes `entries` as one batch on `instance`: their rows one after the other (a lone request
// bound where it lies), every output into scratch room of its bound.
Ran execute(Entries entries, Runnable* instance, MethodGate& gate) {
  uint64_t begun = now_ns();
  const BatchEntry& head = *entries.front();
  const Route& route = *head.route;
  int64_t rows = 0;
  for (const auto& entry : entries) rows += entry->rows;
  std::vector<uint64_t> input_at(head.bindings.size());
  uint64_t at = 0;
  if (entries.size() > 1) {
    for (size_t i = 0; i < head.bindings.size(); ++i) {
      input_at[i] = at;
      uint64_t bytes = 0;
      for (const auto& entry : entries) bytes += entry->input_bytes[i];
      at = align_up(at + bytes);
    }
  }
  uint64_t output_at_start = at;  // the inputs' bytes, laid out alike in device memory
  Ran ran{Outcome<std::vector<OutputBuffer>>(std::vector<OutputBuffer>{}), nullptr, {}, 0, 0};
  ran.output_at.resize(route.most_bytes.size());
  for (size_t o = 0; o < route.most_bytes.size(); ++o) {
    ran.output_at[o] = at;
    at = align_up(at + route.most_bytes[o]);
  }
  uint8_t* room = scratch(at);
  ran.room = room;
  std::vector<InputBinding> bindings = head.bindings;
  if (entries.size() > 1) {
    // Inputs in CUDA regions are gathered in device memory, the others in the scratch room.
    uint8_t* on_device = nullptr;
    for (size_t i = 0; i < bindings.size() && on_device == nullptr; ++i) {
      if (!bindings[i].on_device) continue;
      Outcome<uint8_t*> device = device_scratch(output_at_start);
      if (!device.ok()) {
        ran.outputs = device.take_status();
        return ran;
      }
      on_device = device.value();
    }
    for (size_t i = 0; i < bindings.size(); ++i) {
      uint8_t* start = (bindings[i].on_device ? on_device : room) + input_at[i];
      uint8_t* into = start;
      for (const auto& entry : entries) {
        const auto* from = static_cast<const uint8_t*>(entry->bindings[i].data);
        if (bindings[i].on_device) {
          Status copied = copy_on_device(into, from, entry->input_bytes[i]);
          if (!copied.ok()) {
            ran.outputs = std::move(copied);
            return ran;
          }
        } else {
          std::memcpy(into, from, entry->input_bytes[i]);
        }
        into += entry->input_bytes[i];
      }
      bindings[i].data = start;
      bindings[i].sizes[0] = static_cast<int32_t>(rows);
    }
    if (on_device != nullptr) {
      Status finished = finish_copies();  // the execute's stream does not wait for ours
      if (!finished.ok()) {
        ran.outputs = std::move(finished);
        return ran;
      }
    }
  }
  std::vector<OutputDestination> destinations(route.most_bytes.size());
  for (size_t o = 0; o < route.most_bytes.size(); ++o) {
    if (route.most_bytes[o] > 0) {
      destinations[o] = OutputDestination{room + ran.output_at[o], route.most_bytes[o], true};
    }
  }
  uint64_t bound = now_ns();
  ran.outputs = instance->run(bindings, &destinations);
  gate.observe(instance->last_run_ns());
  ran.input_ns = bound - begun;
  ran.infer_ns = now_ns() - bound;
  return ran;
}

// Each request's own rows of every output it asked for (from row `first_row` of the batch's
// `rows`): into its room (placed as the Python side places arrays, service/engine/outputs.py)
// or its window; appends its answer to `out`. Not ok: the outputs do not keep the batch's rows
// (nobody's rows are known), or one does not go into its window (OutputWindow).
Status hand_out(BatchEntry& entry, const Ran& ran, int64_t first_row, int64_t rows,
                uint32_t& to_device, bool& queued, std::string& out) {
  const std::vector<OutputBuffer>& outputs = ran.outputs.value();
  uint64_t at = entry.room_offset, end = entry.room_offset + entry.room_size;
  for (BatchOutput& asked : entry.outputs) {
    size_t index = asked.wire.index;
    const OutputBuffer& output = outputs[index];
    const Dtype* dtype = find_dtype(output.dtype);
    if (output.is_none || !output.in_destination || output.shape.empty() ||
        output.shape.size() > kMaxDims || dtype == nullptr) {
      return Status(Error::Internal, "output " + std::to_string(index) +
                                         " was not written into the room reserved for it");
    }
    if (static_cast<int64_t>(output.shape[0]) != rows) {
      std::string shape;
      for (size_t extent : output.shape) {
        shape += (shape.empty() ? "" : ", ") + std::to_string(extent);
      }
      return Status(Error::Internal, "output " + std::to_string(index) + " has shape [" + shape +
                                         "], not " + std::to_string(rows) +
                                         " rows: the program does not keep the batch dimension, "
                                         "so it cannot be batched");
    }
    uint64_t row_bytes = dtype->size();
    for (size_t d = 1; d < output.shape.size(); ++d) row_bytes *= output.shape[d];
    uint64_t nbytes = row_bytes * static_cast<uint64_t>(entry.rows);
    const uint8_t* part = ran.room + ran.output_at[index] + row_bytes * first_row;
    asked.wire.ndim = static_cast<uint32_t>(output.shape.size());
    asked.wire.dims[0] = entry.rows;
    for (size_t d = 1; d < output.shape.size(); ++d) {
      asked.wire.dims[d] = static_cast<int64_t>(output.shape[d]);
    }
    if (asked.window != nullptr) {
      if (nbytes > asked.window_bytes) return Status::output_window(index, nbytes);
      // Its client may have shrunk the object meanwhile: a write past its end would fault.
      if (!ShmRegions::intact(*asked.region)) {
        return Status::region_shrank(index, nbytes, ShmRegions::object_bytes(*asked.region),
                                     asked.region->needed);
      }
      ETHOST_RETURN_IF_ERROR(queue_into(*asked.region, asked.window, part, nbytes, queued));
      to_device += asked.region->device >= 0;
      asked.wire.offset = kInRegion;
      continue;
    }
    uint64_t start = align_up(at);
    if (start > end || nbytes > end - start) {
      return Status(Error::Internal,
                    "output " + std::to_string(index) + " outgrew the room its front reserved");
    }
    std::memcpy(entry.arena + start, part, nbytes);
    asked.wire.offset = start;
    at = start + nbytes;
  }
  std::vector<WireOutput> wire;
  wire.reserve(entry.outputs.size());
  for (const BatchOutput& asked : entry.outputs) wire.push_back(asked.wire);
  append_answer(out, entry.request_id, wire.data(), wire.size());
  return Status();
}

// Runs `entries` on `instance` and answers them; gives the instance back after the last
// execute when `release`. A batch the host refused as the inputs' fault runs again in halves.
void settle(Entries entries, Runnable* instance, MethodGate& gate, ServedLog& log, bool release) {
  Ran ran = execute(entries, instance, gate);
  if (!ran.outputs.ok() && entries.size() > 1 && input_fault(ran.outputs.status())) {
    size_t half = entries.size() / 2;
    settle(entries.head(half), instance, gate, log, false);
    settle(entries.after(half), instance, gate, log, release);
    return;
  }
  // The next batch may start on this instance while these requests get their rows: they were
  // written into this thread's scratch, which only this thread's next batch reuses.
  if (release) gate.release(instance);
  uint64_t executed = now_ns();
  if (!ran.outputs.ok()) {
    Status failure = ran.outputs.take_status();
    for (auto& entry : entries) {
      entry->holds.clear();
      entry->replies->failed(*entry->message, failure);
      entry->replies->finished();
    }
    return;
  }
  int64_t rows = 0;
  for (const auto& entry : entries) rows += entry->rows;
  int64_t first_row = 0;
  // Every request's rows first (copies into CUDA windows queued), then one wait for those
  // copies, then the answers.
  std::vector<std::string> answers(entries.size());
  std::vector<Status> written(entries.size());
  bool queued = false;
  for (size_t i = 0; i < entries.size(); ++i) {
    BatchEntry& entry = *entries.begin()[i];
    uint32_t to_device = 0;
    written[i] = hand_out(entry, ran, first_row, rows, to_device, queued, answers[i]);
    first_row += entry.rows;
    if (to_device > 0) log.count_device_copies(to_device);
  }
  if (queued) {
    Status copied = finish_copies();
    if (!copied.ok()) {
      for (Status& each : written) {
        if (each.ok()) each = copied;
      }
    }
  }
  uint32_t executes = 1;  // the first request answered carries the execute
  for (size_t i = 0; i < entries.size(); ++i) {
    auto& entry = entries.begin()[i];
    std::string& answer = answers[i];
    Status& written_i = written[i];
    entry->holds.clear();  // before it is answered: its client may unregister the regions then
    bool refused = written_i.kind == Status::Kind::OutputWindow;
    if (entry->in_regions) log.count_shm(entry->shm_tensors, written_i.ok());
    bool fold = false;
    if (written_i.ok() || refused) {
      uint64_t done = now_ns();
      uint64_t queued = executed - ran.infer_ns - ran.input_ns - entry->begun;
      ServedRecord record{entry->route, entry->front,    rows,    done - entry->begun, ran.input_ns,
                          ran.infer_ns, done - executed, wall_s()};
      record.queue_ns = queued;
      record.executes = executes;
      executes = 0;
      fold = log.add(std::move(record));
    }
    if (written_i.ok()) {
      entry->replies->answered(answer);
    } else {
      entry->replies->failed(*entry->message, std::move(written_i));
    }
    if (fold) entry->replies->want_fold();
    entry->replies->finished();
  }
}

}  // namespace

void run_batch(std::vector<std::unique_ptr<BatchEntry>> batch, Runnable* instance, MethodGate& gate,
               ServedLog& log) {
  if (batch.empty()) {
    gate.release(instance);
    return;
  }
  settle(Entries{batch.data(), batch.size()}, instance, gate, log, true);
}

}  // namespace ethost::lane
