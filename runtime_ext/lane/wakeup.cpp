#include "wakeup.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace ethost::lane {

Wakeup::Wakeup() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

Wakeup::~Wakeup() {
  if (fd_ >= 0) close(fd_);
}

void Wakeup::signal() {
  uint64_t one = 1;
  ssize_t written;
  do {
    written = write(fd_, &one, sizeof(one));
  } while (written < 0 && errno == EINTR);
}

void Wakeup::clear() {
  uint64_t count;
  ssize_t got;
  do {
    got = read(fd_, &count, sizeof(count));
  } while (got < 0 && errno == EINTR);
}

}  // namespace ethost::lane
