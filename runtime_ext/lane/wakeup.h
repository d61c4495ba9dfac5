// An eventfd that wakes the engine's event loop (loop.add_reader): written once to wake it, read
// to take the wake-up. The inbox and the handoffs each own one; when to write stays theirs.
#pragma once

namespace ethost::lane {

class Wakeup {
 public:
  Wakeup();
  ~Wakeup();
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;

  // The eventfd to wait on; -1 if it could not be made (the constructor's only failure).
  int fd() const { return fd_; }
  void signal();  // makes the fd readable
  void clear();   // takes what signal() wrote: the fd is not readable until the next one

 private:
  int fd_ = -1;
};

}  // namespace ethost::lane
