#include "front_link.h"

#include "batcher.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ethost::lane {
namespace {

constexpr size_t kReadChunk = 256 * 1024;
// No message between a front and the engine comes near this (tensors never travel here).
constexpr uint32_t kLongestMessage = 256u * 1024 * 1024;

}  // namespace

FrontLink::FrontLink(int fd, int key, int front, ArenaView arena, const Routes& routes, Lane& lane,
                     Inbox& inbox)
    : fd_(fd),
      key_(key),
      front_(front),
      arena_(arena),
      routes_(routes),
      lane_(lane),
      inbox_(inbox) {}

FrontLink::~FrontLink() {
  stop();
  if (wake_fd_ >= 0) close(wake_fd_);
  close(fd_);
}

bool FrontLink::start() {
  int flags = fcntl(fd_, F_GETFL, 0);
  if (flags < 0 || fcntl(fd_, F_SETFL, flags | O_NONBLOCK) < 0) return false;
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return false;
  in_.resize(kReadChunk);
  thread_ = std::thread([this] { run(); });
  return true;
}

void FrontLink::wake() {
  uint64_t one = 1;
  ssize_t written;
  do {
    written = write(wake_fd_, &one, sizeof(one));
  } while (written < 0 && errno == EINTR);
}

void FrontLink::stop() {
  stopping_.store(true, std::memory_order_release);
  if (thread_.joinable()) {
    shutdown(fd_, SHUT_RDWR);
    wake();
    thread_.join();
  }
  std::unique_lock<std::mutex> lock(flight_mutex_);
  landed_.wait(lock, [this] { return in_flight_ == 0; });
}

void FrontLink::answered(const std::string& framed) {
  served_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(out_mutex_);
  if (ended_.load(std::memory_order_acquire)) return;
  bool was_empty = out_.empty();
  out_.append(framed);
  if (was_empty && flush_locked() && !out_.empty()) wake();
}

void FrontLink::declined(std::string message) {
  std::vector<std::string> one;
  one.push_back(std::move(message));
  inbox_.push(key_, one);
}

void FrontLink::failed(std::string message, Status why) {
  inbox_.failed(key_, std::move(message), std::move(why));
}

void FrontLink::want_fold() {
  inbox_.want_fold();
}

void FrontLink::finished() {
  std::lock_guard<std::mutex> lock(flight_mutex_);
  if (--in_flight_ == 0) landed_.notify_all();
}

void FrontLink::waiting(uint64_t request_id, std::shared_ptr<const Route> route, uint64_t waiter,
                        std::shared_ptr<const std::string> message) {
  std::lock_guard<std::mutex> lock(waiting_mutex_);
  waiting_[request_id] = Waiting{std::move(route), waiter, std::move(message)};
}

void FrontLink::waited(uint64_t request_id) {
  std::lock_guard<std::mutex> lock(waiting_mutex_);
  waiting_.erase(request_id);
}

bool FrontLink::cancel(uint64_t request_id, bool deadline) {
  Waiting found;
  {
    std::lock_guard<std::mutex> lock(waiting_mutex_);
    auto at = waiting_.find(request_id);
    if (at == waiting_.end()) return false;
    found = std::move(at->second);
    waiting_.erase(at);
  }
  // False: an instance was claimed for it (or it joined a batch) meanwhile; it runs, and its
  // answer goes unread.
  bool forgotten = found.route->batcher != nullptr ? found.route->batcher->forget(found.waiter)
                                                   : found.route->gate->forget(found.waiter);
  if (!forgotten) return true;
  inbox_.cancelled(key_, *found.message, deadline);
  finished();
  return true;
}

void FrontLink::send(const char* data, size_t size) {
  std::lock_guard<std::mutex> lock(out_mutex_);
  if (ended_.load(std::memory_order_acquire)) return;
  bool was_empty = out_.empty();
  out_.append(data, size);
  // Written at once where the socket takes it; the thread only hears of what it did not.
  if (was_empty && flush_locked() && !out_.empty()) wake();
}

bool FrontLink::flush_locked() {
  size_t sent = 0;
  while (sent < out_.size()) {
    ssize_t n = ::send(fd_, out_.data() + sent, out_.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      out_.erase(0, sent);
      return false;
    }
  }
  out_.erase(0, sent);
  return true;
}

bool FrontLink::handle_messages() {
  std::shared_ptr<const RouteTable> table = routes_.current();
  bool fold = false;
  size_t at = 0;
  while (in_used_ - at >= 4) {
    uint32_t length;
    std::memcpy(&length, in_.data() + at, 4);
    if (length > kLongestMessage) return false;
    if (in_used_ - at - 4 < length) break;
    const uint8_t* message = in_.data() + at + 4;
    Lane::Result result = Lane::Result::Declined;
    Status failure;
    uint64_t cancelled = 0;
    bool deadline = false;
    if (read_cancel(message, length, cancelled, deadline) && cancel(cancelled, deadline)) {
      at += 4 + length;  // the lane's own request: nothing for Python to cancel
      continue;
    }
    if (length > 0 && message[0] == kInferTag) {
      {
        std::lock_guard<std::mutex> lock(flight_mutex_);
        ++in_flight_;  // before a worker may finish it
      }
      result = lane_.serve(table, message, length, arena_, front_, answers_, fold, failure, this);
      if (result != Lane::Result::Queued) finished();
    }
    if (result == Lane::Result::Declined) {
      declined_.emplace_back(reinterpret_cast<const char*>(message), length);
    } else if (result == Lane::Result::Served) {
      served_.fetch_add(1, std::memory_order_relaxed);
    } else if (result == Lane::Result::Failed) {
      failed(std::string(reinterpret_cast<const char*>(message), length), std::move(failure));
    }
    at += 4 + length;
  }
  if (at > 0) {
    std::memmove(in_.data(), in_.data() + at, in_used_ - at);
    in_used_ -= at;
  }
  if (!answers_.empty()) {
    std::lock_guard<std::mutex> lock(out_mutex_);
    out_.append(answers_);
    answers_.clear();
    flush_locked();
  }
  if (!declined_.empty()) inbox_.push(key_, declined_);
  if (fold) inbox_.want_fold();
  return true;
}

void FrontLink::run() {
  // Named for whoever reads /proc (bench/bench_workers.py sums these threads' CPU time).
  pthread_setname_np(pthread_self(), ("etrt-lane-" + std::to_string(front_)).substr(0, 15).c_str());
  bool alive = true;
  while (alive && !stopping_.load(std::memory_order_acquire)) {
    bool pending;
    {
      std::lock_guard<std::mutex> lock(out_mutex_);
      pending = !out_.empty();
    }
    pollfd fds[2] = {{fd_, static_cast<short>(POLLIN | (pending ? POLLOUT : 0)), 0},
                     {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents & POLLIN) {
      uint64_t count;
      while (read(wake_fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
      }
    }
    if (fds[0].revents & POLLOUT) {
      std::lock_guard<std::mutex> lock(out_mutex_);
      alive = flush_locked();
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      // Read until the socket has nothing more now, handling what came after each read.
      while (alive) {
        if (in_.size() - in_used_ < kReadChunk / 4) in_.resize(in_.size() * 2);
        ssize_t n = recv(fd_, in_.data() + in_used_, in_.size() - in_used_, 0);
        if (n > 0) {
          in_used_ += static_cast<size_t>(n);
          alive = handle_messages();
          if (static_cast<size_t>(n) < kReadChunk / 4) break;  // likely all there was
        } else if (n < 0 && errno == EINTR) {
          continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          break;
        } else {
          alive = false;  // the front closed its end, or the socket failed
        }
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(out_mutex_);
    ended_.store(true, std::memory_order_release);
    out_.clear();
  }
  if (!stopping_.load(std::memory_order_acquire)) inbox_.lost(key_);
}

}  // namespace ethost::lane
