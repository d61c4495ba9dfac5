// etrt_front: the fronts' native path (front_lane.h) and their arena's allocator (slots.h), for
// service/front/native_path.py and service/shared/arena.py. Translation only. No ExecuTorch in
// here: a front never loads a program.
#include "contract_export.h"
#include "front_lane.h"
#include "slots.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <string>

namespace nb = nanobind;
using namespace nb::literals;
using namespace etrt_front;

namespace {

nb::bytes as_bytes(const std::string& text) {
  return nb::bytes(text.data(), text.size());
}

TensorSpec spec_of(nb::handle item, bool output) {
  nb::tuple fields = nb::cast<nb::tuple>(item);
  TensorSpec spec;
  spec.name = nb::cast<std::string>(fields[0]);
  if (fields[1].is_none()) {
    spec.known = false;
  } else {
    const DatatypeInfo* info = find_datatype(nb::cast<std::string>(fields[1]));
    spec.known = info != nullptr;
    if (info != nullptr) spec.datatype = info->type;
  }
  spec.shape = nb::cast<std::vector<int64_t>>(fields[2]);
  spec.dynamic = nb::cast<bool>(fields[3]);
  spec.tensor = !output || nb::cast<bool>(fields[4]);
  return spec;
}

// entries: (model, version, is_default, max_batch, [(method, route, inputs, outputs)]), inputs
// (name, datatype, shape, dynamic), outputs (name, datatype, shape, dynamic, is_tensor).
std::shared_ptr<const FrontTable> table_of(uint64_t generation, nb::list entries) {
  auto table = std::make_shared<FrontTable>();
  table->generation = generation;
  for (nb::handle item : entries) {
    nb::tuple fields = nb::cast<nb::tuple>(item);
    auto entry = std::make_shared<ModelEntry>();
    std::string model = nb::cast<std::string>(fields[0]);
    entry->version = nb::cast<std::string>(fields[1]);
    entry->max_batch = nb::cast<int64_t>(fields[3]);
    for (nb::handle method_item : nb::cast<nb::list>(fields[4])) {
      nb::tuple m = nb::cast<nb::tuple>(method_item);
      MethodEntry method;
      method.name = nb::cast<std::string>(m[0]);
      method.route = nb::cast<uint32_t>(m[1]);
      for (nb::handle input : nb::cast<nb::list>(m[2]))
        method.inputs.push_back(spec_of(input, false));
      for (nb::handle output : nb::cast<nb::list>(m[3]))
        method.outputs.push_back(spec_of(output, true));
      entry->methods.emplace(method.name, std::move(method));
    }
    table->versions[{model, entry->version}] = entry;
    if (nb::cast<bool>(fields[2])) table->defaults[model] = entry;
  }
  return table;
}

std::string_view view_of(nb::bytes data) {
  return std::string_view(data.c_str(), data.size());
}

// The answer's pieces joined into one bytes object (grpcio sends the bytes it is given); None
// when there is no memory for it (the caller answers with an error).
nb::object joined(const AnswerBytes& answer) {
  PyObject* bytes = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(answer.size()));
  if (bytes == nullptr) {
    PyErr_Clear();
    return nb::none();
  }
  char* at = PyBytes_AS_STRING(bytes);
  std::memcpy(at, answer.head.data(), answer.head.size());
  at += answer.head.size();
  for (std::string_view piece : answer.binary) {
    if (!piece.empty()) std::memcpy(at, piece.data(), piece.size());
    at += piece.size();
  }
  return nb::steal(bytes);
}

// Outputs the engine's Python placed: (index, shape, address or bytes, or None for one written
// into its shared memory region) each; `keep` holds the bytes they point into.
std::vector<Output> placed_outputs(nb::list placed, std::vector<nb::bytes>& keep) {
  std::vector<Output> outputs;
  keep.reserve(nb::len(placed));
  for (nb::handle item : placed) {
    nb::tuple fields = nb::cast<nb::tuple>(item);
    Output output;
    output.index = nb::cast<uint32_t>(fields[0]);
    output.shape = nb::cast<std::vector<int64_t>>(fields[1]);
    if (fields[2].is_none()) {
      output.data = nullptr;  // written into the client's region
    } else if (nb::isinstance<nb::bytes>(fields[2])) {
      keep.push_back(nb::cast<nb::bytes>(fields[2]));
      output.data = reinterpret_cast<const uint8_t*>(keep.back().c_str());
    } else {
      output.data = reinterpret_cast<const uint8_t*>(nb::cast<uintptr_t>(fields[2]));
    }
    outputs.push_back(std::move(output));
  }
  return outputs;
}

const char* protocol_name(Protocol protocol) {
  switch (protocol) {
    case Protocol::V2: return "v2";
    case Protocol::Grpc: return "gRPC";
    default: return "native";
  }
}

}  // namespace

NB_MODULE(etrt_front, m) {
  m.doc() = "The fronts' native path for small inference requests, and their arena's allocator.";
  ethost::export_contract_constants(m);

  nb::class_<Slots>(m, "Slots", "256-byte aligned slots of an arena: first fit, coalesced.")
      .def(
          "__init__",
          [](Slots* self, uint64_t size, uintptr_t base, uint64_t return_bytes) {
            new (self) Slots(size, reinterpret_cast<void*>(base), return_bytes);
          },
          "size"_a, "base"_a, "return_bytes"_a,
          "`base`: the arena's address here (0: none), whose freed pages go back to the kernel")
      .def(
          "allocate",
          [](Slots& self, uint64_t nbytes) -> std::optional<std::pair<uint64_t, uint64_t>> {
            std::optional<Slot> slot = self.allocate(nbytes);
            if (!slot) return std::nullopt;
            return std::make_pair(slot->offset, slot->size);
          },
          "nbytes"_a, "(offset, size) of a free slot, or None when none fits now")
      .def(
          "free",
          [](Slots& self, uint64_t offset, uint64_t size) { self.free(Slot{offset, size}); },
          "offset"_a, "size"_a)
      .def_prop_ro("in_use", &Slots::in_use)
      .def_prop_ro("size", &Slots::size)
      .def("free_extents", &Slots::free_extents)
      .def("set_pinned", &Slots::set_pinned, "pinned"_a);

  nb::class_<FrontLane>(m, "FrontLane", "A front's native path over one arena and engine link.")
      .def(
          "__init__",
          [](FrontLane* self, std::shared_ptr<Slots> slots, uintptr_t arena, uintptr_t control,
             uint64_t max_native_body, uint64_t max_v2_body, uint64_t max_json,
             std::optional<std::string> token, uint64_t max_streamed_body) {
            FrontConfig config;
            config.max_native_body = max_native_body;
            config.max_v2_body = max_v2_body;
            config.max_json = max_json;
            config.max_streamed_body = max_streamed_body;
            config.has_token = token.has_value();
            config.token = token.value_or("");
            new (self)
                FrontLane(std::move(config), std::move(slots), reinterpret_cast<uint8_t*>(arena),
                          reinterpret_cast<const volatile uint64_t*>(control));
          },
          "slots"_a, "arena"_a, "control"_a, "max_native_body"_a, "max_v2_body"_a, "max_json"_a,
          "token"_a.none(), "max_streamed_body"_a = 0,
          "`max_streamed_body`: the largest v2 binary body taken before it has arrived whole")
      .def(
          "publish",
          [](FrontLane& self, uint64_t generation, nb::list entries) {
            self.publish(table_of(generation, entries));
          },
          "generation"_a, "entries"_a)
      .def(
          "take",
          [](FrontLane& self, nb::bytes data) -> nb::object {
            FrontLane::Taken taken;
            if (self.take(data.c_str(), data.size(), taken) != FrontLane::Take::Taken) {
              return nb::none();
            }
            nb::object message = taken.complete ? nb::object(as_bytes(taken.message)) : nb::none();
            return nb::make_tuple(taken.id, taken.consumed, message);
          },
          "data"_a,
          "(request id, bytes it took, the lane message) or None (declined); the message is "
          "None while the body arrives (fill() takes the rest)")
      .def(
          "fill",
          [](FrontLane& self, uint64_t id, nb::bytes data) -> nb::object {
            size_t consumed = 0;
            std::string message;
            switch (self.fill(id, data.c_str(), data.size(), consumed, message)) {
              case FrontLane::Fill::Unknown: return nb::none();
              case FrontLane::Fill::Arriving: return nb::make_tuple(consumed, nb::none());
              case FrontLane::Fill::Complete: return nb::make_tuple(consumed, as_bytes(message));
            }
            return nb::none();
          },
          "id"_a, "data"_a,
          "More of an arriving body: (bytes of `data` it took, the lane message once the body "
          "is whole, else None), or None for no such request")
      .def(
          "answer_lane",
          [](FrontLane& self, uint64_t id, nb::bytes payload, nb::bytes headers,
             int fd) -> nb::object {
            std::string out;
            bool keep_alive = true;
            if (!self.answer_lane(id, reinterpret_cast<const uint8_t*>(payload.c_str()),
                                  payload.size(), view_of(headers), out, keep_alive, fd)) {
              return nb::none();
            }
            return nb::make_tuple(as_bytes(out), keep_alive);
          },
          "id"_a, "payload"_a, "default_headers"_a, "fd"_a = -1,
          "(the HTTP answer, whether the connection stays open), or None: not written here. "
          "`fd`: the connection's socket, written to at once; the answer is then what it did "
          "not take (answer_send.h)")
      .def(
          "answer",
          [](FrontLane& self, uint64_t id, std::string version, nb::list placed, nb::bytes headers,
             int fd) -> nb::object {
            std::vector<nb::bytes> keep;
            std::vector<Output> outputs = placed_outputs(placed, keep);
            std::string out;
            bool keep_alive = true;
            if (!self.answer(id, version, outputs, view_of(headers), out, keep_alive, fd)) {
              return nb::none();
            }
            return nb::make_tuple(as_bytes(out), keep_alive);
          },
          "id"_a, "version"_a, "outputs"_a, "default_headers"_a, "fd"_a = -1,
          "From outputs the engine's Python placed: (index, shape, address or bytes, or None for "
          "one written into its shared memory region) each.")
      .def(
          "take_grpc",
          [](FrontLane& self, nb::bytes data) -> nb::object {
            FrontLane::Taken taken;
            if (self.take_grpc(reinterpret_cast<const uint8_t*>(data.c_str()), data.size(),
                               taken) != FrontLane::Take::Taken) {
              return nb::none();
            }
            return nb::make_tuple(taken.id, as_bytes(taken.message));
          },
          "data"_a,
          "A gRPC ModelInferRequest message: (request id, the lane message) or None (declined)")
      .def(
          "answer_lane_grpc",
          [](FrontLane& self, uint64_t id, nb::bytes payload) -> nb::object {
            nb::object message = nb::none();
            bool keep_alive;
            self.answer_lane_to(
                id, reinterpret_cast<const uint8_t*>(payload.c_str()), payload.size(), {},
                [&](const AnswerBytes& answer) { message = joined(answer); }, keep_alive);
            return message;
          },
          "id"_a, "payload"_a,
          "The ModelInferResponse message for the lane's answer, or None: not written here")
      .def(
          "answer_grpc",
          [](FrontLane& self, uint64_t id, std::string version, nb::list placed) -> nb::object {
            std::vector<nb::bytes> keep;
            std::vector<Output> outputs = placed_outputs(placed, keep);
            nb::object message = nb::none();
            bool keep_alive;
            self.answer_to(
                id, version, outputs, {},
                [&](const AnswerBytes& answer) { message = joined(answer); }, keep_alive);
            return message;
          },
          "id"_a, "version"_a, "outputs"_a,
          "The ModelInferResponse message from outputs the engine's Python placed (as answer())")
      .def(
          "release",
          [](FrontLane& self, uint64_t id) -> nb::object {
            Protocol protocol;
            bool keep_alive;
            if (!self.release(id, protocol, keep_alive)) return nb::none();
            return nb::make_tuple(protocol_name(protocol), keep_alive);
          },
          "id"_a, "(protocol, keep_alive) of a request whose answer is not a 200, freed")
      .def("output_index", &FrontLane::output_index, "id"_a, "name"_a)
      .def_prop_ro("pending", &FrontLane::pending);

  // What tests compare with orjson: the numbers and the JSON data of an output.
  m.def("json_data", [](const std::string& datatype, nb::bytes data) {
    const DatatypeInfo* info = find_datatype(datatype);
    if (info == nullptr) throw nb::value_error("unknown datatype");
    std::string out;
    append_json_data(out, info->type, reinterpret_cast<const uint8_t*>(data.c_str()),
                     data.size() / info->size);
    return as_bytes(out);
  });
}
