// The engine's end of one front's socket: a thread that reads the front's messages, serves the
// lane's requests on the spot (lane.h) and hands every other message to the engine's Python side
// (inbox.h), and that writes whatever is to go back, the lane's answers and Python's messages
// alike, in as few system calls as their arrival allows.
//
// Messages are framed by a u32 length (service/ipc/frames.py). The thread never takes the GIL:
// a front's stream of small requests is answered without the engine's event loop, one thread per
// front, so the engine's throughput for them grows with the fronts instead of stopping at one
// Python thread.
#pragma once

#include "inbox.h"
#include "lane.h"
#include "routes.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace ethost::lane {

class FrontLink final : public Replies {
 public:
  // Takes `fd` (a connected stream socket) and closes it when destroyed. `key` names this link
  // in the inbox (unique per link: a front started again gets a new link, same `front`).
  FrontLink(int fd, int key, int front, ArenaView arena, const Routes& routes, Lane& lane,
            Inbox& inbox);
  ~FrontLink();
  FrontLink(const FrontLink&) = delete;
  FrontLink& operator=(const FrontLink&) = delete;

  // Starts the thread; false (with errno) if it could not be set up.
  bool start();
  // Queues already-framed bytes to go out; never blocks. Dropped once the link has ended.
  void send(const char* data, size_t size);
  // Ends the link and waits for its thread and for its requests on the lane's workers:
  // afterwards nothing touches the arena.
  void stop();

  // Replies, from the lane's workers.
  void answered(const std::string& framed) override;
  void declined(std::string message) override;
  void failed(std::string message, Status why) override;
  void want_fold() override;
  void finished() override;
  void waiting(uint64_t request_id, std::shared_ptr<const Route> route, uint64_t waiter,
               std::shared_ptr<const std::string> message) override;
  void waited(uint64_t request_id) override;

  int front() const { return front_; }
  // Requests the lane answered on this link.
  uint64_t served() const { return served_.load(std::memory_order_relaxed); }

 private:
  void run();
  // Handles every whole message in the read buffer; false on a message too long to be real.
  bool handle_messages();
  // Writes what waits, as far as the socket takes it now (the caller holds out_mutex_).
  bool flush_locked();
  void wake();
  // The front's cancel of `request_id` (`deadline`: its client stopped waiting at the request's
  // deadline): true when it was a lane request still waiting for an instance, now dropped
  // (Python counts and answers it); false when the lane has none such.
  bool cancel(uint64_t request_id, bool deadline);

  const int fd_;
  const int key_;
  const int front_;
  const ArenaView arena_;
  const Routes& routes_;
  Lane& lane_;
  Inbox& inbox_;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> ended_{false};
  std::atomic<uint64_t> served_{0};

  std::vector<uint8_t> in_;  // read, not yet handled (the thread's alone)
  size_t in_used_ = 0;
  std::vector<std::string> declined_;  // the thread's alone
  std::string answers_;                // the thread's alone

  std::mutex out_mutex_;
  std::string out_;  // framed bytes waiting for the socket

  // Lane requests waiting at a gate, by request id (ids are unique per front).
  struct Waiting {
    std::shared_ptr<const Route> route;
    uint64_t waiter = 0;
    std::shared_ptr<const std::string> message;
  };
  std::mutex waiting_mutex_;
  std::unordered_map<uint64_t, Waiting> waiting_;

  std::mutex flight_mutex_;
  std::condition_variable landed_;
  size_t in_flight_ = 0;  // requests of this link on the lane's workers
};

}  // namespace ethost::lane
