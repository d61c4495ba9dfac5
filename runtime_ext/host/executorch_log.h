// ExecuTorch reports why a call failed only through its log: this captures the log lines per
// thread so the Status of a failed ExecuTorch call can quote them. Messages are still forwarded
// to the sink that was installed before.
#pragma once

#include "status.h"

#include <string>

namespace ethost {

void install_log_capture();
void clear_last_log_error();
// Every error line since the last clear (failing that, the last info line).
std::string last_log_error();

// The Status of a failed ExecuTorch call, quoting the captured log.
Status from_executorch(Error code, std::string action, std::string path);

}  // namespace ethost
