#include "executorch_log.h"

#include <executorch/runtime/platform/platform.h>

#include <cstdlib>
#include <cstring>

namespace ethost {
namespace {

thread_local std::string t_last_error;
// Some failures (e.g. a key missing from the data files) are only logged at Info level.
thread_local std::string t_last_info;
pal_emit_log_message_method g_forward_log = nullptr;
// Whether non-fatal lines still reach the sink installed before. Every line a failed call logs
// is captured and quoted in its Status (a refused input's 422 carries the kernel's reason), so
// printing them as well only repeats the reason as a dozen unattributed stderr lines per request.
// ETHOST_EXECUTORCH_LOG=all forwards everything (debugging; the load-check child sets it, since
// the tail of its stderr is what a crash report quotes).
bool g_forward_all = false;

// A failure is often logged as a chain (a kernel's reason, then the runtime's "arg 2 with
// type id 1"): the first lines carry the cause, so every error line since the last clear is
// kept, up to a bound.
constexpr size_t kMaxErrorText = 2000;

void capture_log(et_timestamp_t timestamp, et_pal_log_level_t level, const char* filename,
                 const char* function, size_t line, const char* message, size_t length) {
  std::string text(message, length);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
    text.pop_back();
  }
  if (level == kError || level == kFatal) {
    if (t_last_error.size() < kMaxErrorText) {
      t_last_error += (t_last_error.empty() ? "" : "; ") + text;
    }
  } else {
    t_last_info = std::move(text);
  }
  if (g_forward_log != nullptr && (g_forward_all || level == kFatal)) {
    g_forward_log(timestamp, level, filename, function, line, message, length);
  }
}

}  // namespace

void install_log_capture() {
  const char* forward = std::getenv("ETHOST_EXECUTORCH_LOG");
  g_forward_all = forward != nullptr && std::strcmp(forward, "all") == 0;
  const executorch::runtime::PalImpl* current = executorch::runtime::get_pal_impl();
  if (current != nullptr && current->emit_log_message != &capture_log) {
    g_forward_log = current->emit_log_message;
  }
  executorch::runtime::register_pal(executorch::runtime::PalImpl::create(&capture_log, __FILE__));
}

void clear_last_log_error() {
  t_last_error.clear();
  t_last_info.clear();
}

std::string last_log_error() {
  return t_last_error.empty() ? t_last_info : t_last_error;
}

Status from_executorch(Error code, std::string action, std::string path) {
  Status s(code, last_log_error());
  s.at(std::move(action), std::move(path));
  return s;
}

}  // namespace ethost
