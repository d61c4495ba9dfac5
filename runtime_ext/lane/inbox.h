// What the link threads hand the engine's Python side: messages the lane declined (and every
// message that is not a lane request), lane requests that ran and failed (with why), lane
// requests cancelled before they ran (their client went away, or stopped waiting at the
// request's deadline), a link that ended, and a served log that wants folding.
// One eventfd wakes the event loop (loop.add_reader); it is written once per batch, only when
// the loop was not already due to look.
#pragma once

#include "status.h"
#include "wakeup.h"

#include <mutex>
#include <string>
#include <vector>

namespace ethost::lane {

struct InboxItem {
  int link = 0;            // the key of the link it came through (front_link.h)
  std::string payload;     // a whole message, without its length prefix
  bool lost = false;       // the link ended (payload empty)
  Status failure;          // not ok: the lane ran this request and it failed so (lane.h)
  bool cancelled = false;  // the lane request was cancelled while it waited: never ran
  bool deadline = false;   // cancelled because its client stopped waiting at its deadline
};

class Inbox {
 public:
  Inbox() = default;
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;

  // The eventfd to wait on; -1 if it could not be made (the constructor's only failure).
  int fd() const { return wakeup_.fd(); }

  void push(int link, std::vector<std::string>& payloads);  // moved out of `payloads`
  void failed(int link, std::string payload, Status why);
  void cancelled(int link, std::string payload, bool deadline);
  void lost(int link);
  void want_fold();

  // Everything waiting; `fold` says whether the served log asked to be drained.
  std::vector<InboxItem> drain(bool& fold);

 private:
  void wake_locked();

  Wakeup wakeup_;
  std::mutex mutex_;
  std::vector<InboxItem> items_;
  bool fold_ = false;
  bool woken_ = false;
};

}  // namespace ethost::lane
