// The TensorRTBackend delegate: ExecuTorch's side of the delegate, and its registration, which
// happens when this library is loaded. This is the ExecuTorch boundary: Status values become
// ExecuTorch Errors (with the reason logged) here, and no C++ exception passes it.
#pragma once

#include <string>

namespace ethost_trt {

// Names the delegate instances the calling thread creates from now on (their origin's owner);
// also starts a fresh count of delegates per method instance. The server sets the model's name
// while it loads a model's method instances, which it does on one thread.
void set_instance_owner(std::string owner);

// Null when this library's backend holds the id; otherwise why it does not (e.g. another
// library registered TensorRTBackend first), so the service can refuse to start.
const char* registration_error();

}  // namespace ethost_trt
