// The Python face of the engine's native lane (part of the ethost module): LaneGate per model
// method, LaneHub for the engine (route table, inbox, served log) and the FrontLink per front.
#pragma once

#include <nanobind/nanobind.h>

namespace ethost {

void register_lane(nanobind::module_& m);
// `gate` (a LaneGate) counts one more or one fewer caller waiting for an instance.
void lane_gate_add_waiting(nanobind::handle gate, int delta);
// An instance of `gate`'s method was freed by Python: hands it to a lane request waiting.
void lane_gate_poke(nanobind::handle gate);

}  // namespace ethost
