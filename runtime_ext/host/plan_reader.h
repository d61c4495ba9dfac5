// Which of a method's inputs only delegates read, from the program's own flatbuffer: something
// ExecuTorch does not expose, and which the host needs before it hands a method an input in
// device memory as it is (a CPU kernel reading a device pointer faults the process).
//
// An input qualifies when every instruction naming it is a call to a delegate whose backend
// takes device memory, and it is not a method output (copied out by the CPU), not moved, and
// in no tensor list. The reader checks every offset against the file; anything it cannot read
// makes every input "the CPU may read it", which only costs a copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ethost {

std::vector<bool> inputs_read_only_by_delegates(
    const uint8_t* data, size_t size, const std::string& method,
    const std::function<bool(const std::string& backend_id)>& takes_device_memory);

}  // namespace ethost
