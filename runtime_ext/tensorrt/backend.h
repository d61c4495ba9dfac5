// The TensorRTBackend delegate: ExecuTorch's side of the delegate, and its registration, which
// happens when this library is loaded. This is the ExecuTorch boundary: Status values become
// ExecuTorch Errors (with the reason logged) here, and no C++ exception passes it.
#pragma once

namespace ethost_trt {

// Null when this library's backend holds the id; otherwise why it does not (e.g. another
// library registered TensorRTBackend first), so the service can refuse to start.
const char* registration_error();

}  // namespace ethost_trt
