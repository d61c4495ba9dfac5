// Translation only: Python values into routes and links, drained messages and served records
// back into Python objects. The link threads never enter here.
#include "lane_module.h"

#include "batcher.h"
#include "errors_module.h"
#include "front_link.h"
#include "handoffs.h"
#include "inbox.h"
#include "lane.h"
#include "method_gate.h"
#include "routes.h"
#include "served_log.h"

#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace nb = nanobind;
using namespace nb::literals;

namespace ethost {
namespace {

using lane::Batcher;
using lane::BatchPolicy;
using lane::FrontLink;
using lane::Handoffs;
using lane::Inbox;
using lane::InboxItem;
using lane::Lane;
using lane::MethodGate;
using lane::Route;
using lane::Routes;
using lane::RouteTable;
using lane::ServedLog;

// A method's gate, with what a route needs of the method's signature (read from one instance).
struct PyGate {
  std::shared_ptr<MethodGate> gate;
  std::vector<std::shared_ptr<MethodInstance>> instances;  // by the gate's index
  std::vector<executorch::aten::ScalarType> inputs;
  bool tensor_inputs = true;  // every input a tensor: the lane binds nothing else
  std::vector<uint64_t> most_bytes;
  std::vector<uint64_t> row_bytes;  // per output: one row of its bound (Route::row_bytes)
};

PyGate make_gate(const std::vector<std::shared_ptr<MethodInstance>>& instances) {
  PyGate out;
  std::vector<std::shared_ptr<lane::Runnable>> runnables;
  for (const auto& instance : instances) {
    runnables.push_back(std::make_shared<lane::InstanceRunnable>(instance));
  }
  out.gate = std::make_shared<MethodGate>(std::move(runnables));
  out.instances = instances;
  if (!instances.empty()) {
    const MethodSpec& spec = instances.front()->spec();
    for (const auto& input : spec.inputs) {
      out.tensor_inputs = out.tensor_inputs && input.is_tensor;
      out.inputs.push_back(input.dtype);
    }
    for (const auto& output : spec.outputs) {
      out.most_bytes.push_back(output.is_tensor ? output.nbytes : 0);
      bool rows = output.is_tensor && !output.shape.empty() && output.shape[0] > 0;
      out.row_bytes.push_back(rows ? output.nbytes / static_cast<uint64_t>(output.shape[0]) : 0);
    }
  }
  return out;
}

// Everything the engine's link threads share.
struct LaneHub {
  LaneHub(size_t fold_at, size_t workers)
      : log(fold_at), pool(workers), lane(log, workers > 0 ? &pool : nullptr, &regions) {}
  ServedLog log;
  lane::Workers pool;
  lane::ShmRegions regions;  // the clients' system regions Python mapped (service/shm/)
  Lane lane;
  Routes routes;
  Inbox inbox;
  // The batch queues of the methods that merge, by gate (publish keeps each for as long as its
  // method merges with the same policy). Last: they go first, while the log and workers last.
  std::map<const MethodGate*, std::shared_ptr<Batcher>> batchers;
};

bool same_policy(const BatchPolicy& a, const BatchPolicy& b) {
  return a.max_batch == b.max_batch && a.delay_ns == b.delay_ns && a.preferred == b.preferred;
}

struct PyLink {
  std::shared_ptr<LaneHub> hub;  // outlives the link
  std::unique_ptr<FrontLink> link;
};

void publish(LaneHub& hub, uint64_t generation, double inline_ns, nb::list entries) {
  auto table = std::make_shared<RouteTable>();
  table->generation = generation;
  table->inline_ns = inline_ns;
  std::map<const MethodGate*, std::shared_ptr<Batcher>> batchers;
  std::vector<std::shared_ptr<Batcher>> retired;
  for (nb::handle entry : entries) {
    nb::tuple fields = nb::cast<nb::tuple>(entry);
    const PyGate& gate = nb::cast<const PyGate&>(fields[4]);
    if (!gate.tensor_inputs) continue;  // Python serves methods taking other values
    auto route = std::make_shared<Route>();
    route->id = nb::cast<uint32_t>(fields[0]);
    route->model = nb::cast<std::string>(fields[1]);
    route->version = nb::cast<std::string>(fields[2]);
    route->method = nb::cast<std::string>(fields[3]);
    route->gate = gate.gate;
    route->inputs = gate.inputs;
    route->most_bytes = gate.most_bytes;
    route->max_batch = nb::cast<int64_t>(fields[5]);
    route->on_workers = nb::len(fields) > 7 && nb::cast<bool>(fields[7]);
    route->row_bytes = gate.row_bytes;
    if (nb::len(fields) > 8 && !fields[8].is_none() && route->on_workers) {
      // (queue delay in ns, preferred batch sizes): the method merges its requests.
      nb::tuple batching = nb::cast<nb::tuple>(fields[8]);
      BatchPolicy policy{route->max_batch, nb::cast<uint64_t>(batching[0]),
                         nb::cast<std::vector<int64_t>>(batching[1])};
      std::shared_ptr<Batcher>& kept = batchers[gate.gate.get()];
      if (kept == nullptr || !same_policy(kept->policy(), policy)) {
        if (kept != nullptr) retired.push_back(kept);
        kept = std::make_shared<Batcher>(gate.gate, policy, hub.pool, hub.log);
      }
      route->batcher = kept;
    }
    table->routes.emplace(route->id, std::move(route));
  }
  for (auto& [gate, batcher] : hub.batchers) {
    if (batchers.count(gate) == 0) retired.push_back(batcher);
  }
  hub.batchers = std::move(batchers);
  hub.routes.publish(std::move(table));
  // Their requests go to Python (nothing ran); batches running finish on the workers.
  nb::gil_scoped_release released;
  for (auto& batcher : retired) batcher->stop();
}

nb::tuple drain(LaneHub& hub) {
  bool fold = false;
  std::vector<InboxItem> items;
  {
    nb::gil_scoped_release released;
    items = hub.inbox.drain(fold);
  }
  nb::list out;
  for (auto& item : items) {
    nb::object payload =
        item.lost ? nb::none()
                  : nb::steal(PyBytes_FromStringAndSize(
                        item.payload.data(), static_cast<Py_ssize_t>(item.payload.size())));
    nb::object failure = item.failure.ok() ? nb::none() : python_error(item.failure);
    out.append(nb::make_tuple(item.link, payload, failure, item.cancelled, item.deadline));
  }
  return nb::make_tuple(out, fold);
}

// The served log, drained and summed per (route, front, rows), with each request's total and
// each nonzero queue wait as float64 seconds for the histograms. One Python tuple per request
// (about 3 us with the views' loops) saturated the engine's one Python thread at ~340k lane
// requests a second; the log then grew for as long as the load lasted.
nb::list served(LaneHub& hub) {
  struct Group {
    const lane::ServedRecord* first = nullptr;
    uint64_t count = 0, executes = 0, total_ns = 0, input_ns = 0, infer_ns = 0, output_ns = 0;
    uint64_t run_ns = 0, queue_ns = 0;
    double at = 0;
    std::vector<double> totals, queued;
  };
  std::vector<lane::ServedRecord> records = hub.log.drain();
  std::map<std::tuple<const lane::Route*, int, int64_t>, Group> groups;
  for (const auto& r : records) {
    Group& g = groups[{r.route.get(), r.front, r.rows}];
    if (g.first == nullptr) g.first = &r;
    g.count += 1;
    g.executes += r.executes;
    g.total_ns += r.total_ns;
    g.input_ns += r.input_ns;
    g.infer_ns += r.infer_ns;
    g.output_ns += r.output_ns;
    if (r.executes != 0) g.run_ns += r.infer_ns;
    g.queue_ns += r.queue_ns;
    g.at = std::max(g.at, r.at);
    g.totals.push_back(static_cast<double>(r.total_ns) / 1e9);
    if (r.queue_ns != 0) g.queued.push_back(static_cast<double>(r.queue_ns) / 1e9);
  }
  auto seconds = [](const std::vector<double>& values) {
    return nb::bytes(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double));
  };
  nb::list out;
  for (const auto& [key, g] : groups) {
    const lane::Route& route = *g.first->route;
    out.append(nb::make_tuple(route.model, route.version, route.method, g.first->rows,
                              g.first->front, g.count, g.executes, g.total_ns, g.input_ns,
                              g.infer_ns, g.output_ns, g.run_ns, g.queue_ns, g.at,
                              seconds(g.totals), seconds(g.queued)));
  }
  return out;
}

PyLink attach(std::shared_ptr<LaneHub> hub, int fd, int key, int front, uintptr_t address,
              size_t size) {
  lane::ArenaView arena{reinterpret_cast<uint8_t*>(address), size};
  PyLink out{
      hub, std::make_unique<FrontLink>(fd, key, front, arena, hub->routes, hub->lane, hub->inbox)};
  if (!out.link->start()) {
    int err = errno;
    raise_python(Status::os_error(err, "",
                                  std::string("cannot start the link of front ") +
                                      std::to_string(front) + ": " + std::strerror(err)));
  }
  return out;
}

}  // namespace

void lane_gate_release(nb::handle gate, const MethodInstance& instance) {
  const PyGate& py = nb::cast<const PyGate&>(gate);
  std::shared_ptr<MethodGate> held = py.gate;
  for (size_t i = 0; i < py.instances.size(); ++i) {
    if (py.instances[i].get() == &instance) {
      nb::gil_scoped_release released;
      held->release(held->instance(i));
      return;
    }
  }
}

void register_lane(nb::module_& m) {
  nb::class_<Handoffs>(m, "Handoffs",
                       "Instances gates hand to Python's waiting requests; fd wakes the loop.")
      .def("__init__", [](Handoffs* self) { new (self) Handoffs(); })
      .def_prop_ro("fd", &Handoffs::fd)
      .def(
          "drain",
          [](Handoffs& self) {
            nb::gil_scoped_release released;
            return self.drain();
          },
          "(token, instance index, or -1 when the gate closed) per handoff since the last.");

  nb::class_<PyGate>(m, "LaneGate",
                     "One model method's instances, handed out by one owner to the engine's lane "
                     "and to Python alike (runtime_ext/lane/method_gate.h).")
      .def(
          "__init__",
          [](PyGate* self, const std::vector<std::shared_ptr<MethodInstance>>& instances) {
            new (self) PyGate(make_gate(instances));
          },
          "instances"_a)
      .def(
          "observe", [](PyGate& self, uint64_t ns) { self.gate->observe(ns); }, "took_ns"_a,
          "Folds one execute's nanoseconds into the recent execute time.")
      .def_prop_ro(
          "recent_ns", [](const PyGate& self) { return self.gate->recent_ns(); },
          "Recent execute time in nanoseconds; negative before the first.")
      .def(
          "claim",
          [](PyGate& self) {
            lane::Runnable* instance = self.gate->claim();
            return instance == nullptr ? -1 : static_cast<int64_t>(self.gate->index_of(instance));
          },
          "The index of a free instance, now claimed (run it with execute(..., gate=this), which "
          "gives it back), or -1: none free, someone queued, or closed.")
      .def(
          "wait",
          [](PyGate& self, Handoffs& handoffs, uint64_t token) {
            std::shared_ptr<MethodGate> gate = self.gate;
            nb::gil_scoped_release released;
            gate->claim_or_wait(handoffs.waiter(*gate, token), token);
          },
          "handoffs"_a, "token"_a,
          "Queues for the next instance (nonzero `token`); `handoffs` delivers its index.")
      .def(
          "forget",
          [](PyGate& self, uint64_t token) {
            std::shared_ptr<MethodGate> gate = self.gate;
            nb::gil_scoped_release released;
            return gate->forget(token);
          },
          "token"_a, "Leaves the queue; False when an instance was already handed over.")
      .def(
          "release",
          [](PyGate& self, size_t index) {
            std::shared_ptr<MethodGate> gate = self.gate;
            nb::gil_scoped_release released;
            gate->release(gate->instance(index));
          },
          "index"_a, "Gives a claimed instance back unused (to the first waiter, else free).")
      .def_prop_ro("waiters", [](const PyGate& self) { return self.gate->waiters(); })
      .def_prop_ro("size", [](const PyGate& self) { return self.gate->size(); })
      .def("close",
           [](PyGate& self) {
             nb::gil_scoped_release released;
             self.gate->close();
           })
      .def_prop_ro("closed", [](const PyGate& self) { return self.gate->closed(); });

  nb::class_<LaneHub>(m, "LaneHub",
                      "The engine's native lane: the routes it may serve, the messages it hands "
                      "to Python (inbox_fd wakes the event loop) and the requests it served.")
      .def(nb::init<size_t, size_t>(), "fold_at"_a, "workers"_a,
           "`workers`: threads for the lane's longer executes (0: it serves short ones only)")
      .def("publish", &publish, "generation"_a, "inline_ns"_a, "routes"_a,
           "Replaces the routes: (id, model, version, method, LaneGate, max_batch, [signature, "
           "whether longer executes may run on the workers]) each.")
      .def_prop_ro("inbox_fd", [](const LaneHub& self) { return self.inbox.fd(); })
      .def("drain", &drain,
           "([(link key, message bytes or None when the link ended, None or the exception a "
           "lane request that ran failed with, as Method.execute raises it, whether the lane "
           "request was cancelled while it waited (never ran), whether that cancel said its "
           "deadline had passed)], whether the served log wants folding)")
      .def(
          "add_shm_region",
          [](LaneHub& self, const std::string& name, uintptr_t address, uint64_t size, int fd,
             uint64_t needed, int device) {
            return self.regions.add(name, reinterpret_cast<uint8_t*>(address), size, fd, needed,
                                    device);
          },
          "name"_a, "address"_a, "size"_a, "fd"_a, "needed"_a, "device"_a = -1,
          "A system region Python mapped: its window (`size` bytes at `address`), the object's "
          "descriptor and the size the object must keep; or (`device` >= 0) a CUDA region "
          "Python opened on that device, `address` its device address (fd -1, needed 0). False "
          "when the name is taken in its kind.")
      .def(
          "remove_shm_regions",
          [](LaneHub& self, const std::vector<std::string>& names, bool cuda) {
            return self.regions.remove(names, cuda);
          },
          "names"_a, "cuda"_a = false,
          "Removes the regions (those it has) unless one is in use by a lane request: then "
          "(its name, its requests in flight), else ('', 0). Python unmaps them only after.")
      .def(
          "shm_in_flight",
          [](const LaneHub& self, const std::string& name, bool cuda) {
            return self.regions.in_flight(name, cuda);
          },
          "name"_a, "cuda"_a = false)
      .def_prop_ro(
          "shm_served",
          [](const LaneHub& self) {
            return std::make_pair(self.log.shm_requests(), self.log.shm_tensors());
          },
          "(requests the lane served with tensors in regions, those tensors in system regions "
          "bound where they lie)")
      .def_prop_ro(
          "shm_to_device", [](const LaneHub& self) { return self.log.shm_to_device(); },
          "outputs the lane copied from the host into CUDA regions' windows")
      .def("served", &served,
           "Drains the served log, summed per route, front and rows: (model, version, method, "
           "rows, front, count, executes, total_ns, input_ns, infer_ns, output_ns, run_ns, "
           "queue_ns, at, totals, queued), the last two float64 seconds per request (queued: "
           "the nonzero waits only).");

  nb::class_<PyLink>(m, "FrontLink", "The engine's end of one front's socket (its own thread).")
      .def(
          "send", [](PyLink& self, nb::bytes data) { self.link->send(data.c_str(), data.size()); },
          "data"_a, "Framed bytes to write; never blocks.")
      .def(
          "stop",
          [](PyLink& self) {
            nb::gil_scoped_release released;
            self.link->stop();
          },
          "Ends the link and waits for its thread.")
      .def_prop_ro("served", [](const PyLink& self) { return self.link->served(); })
      .def_prop_ro("front", [](const PyLink& self) { return self.link->front(); });

  m.def("attach_front", &attach, "hub"_a, "fd"_a, "key"_a, "front"_a, "address"_a, "size"_a,
        "Takes the socket `fd` of front `front`, whose arena is mapped at `address` (`size` "
        "bytes), and starts its link thread; the hub's drain names the link by `key`.");
}

}  // namespace ethost
