// The Python face of the engine's native lane (part of the ethost module): LaneGate per model
// method, LaneHub for the engine (route table, inbox, served log) and the FrontLink per front.
#pragma once

#include <nanobind/nanobind.h>

namespace ethost {

class MethodInstance;

void register_lane(nanobind::module_& m);
// Gives `instance`, claimed from `gate` (a LaneGate), back through the gate: to the first
// request waiting for one, else free. Call with the GIL held (released while handing on).
void lane_gate_release(nanobind::handle gate, const MethodInstance& instance);

}  // namespace ethost
