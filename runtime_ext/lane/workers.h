// Threads that run the lane's longer executes, so a front's link thread goes on reading while
// they run (lane.h): one front's requests to a method taking milliseconds execute side by side
// on its instances, as the engine's Python would run them in its worker threads.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ethost::lane {

class Workers {
 public:
  explicit Workers(size_t count);
  ~Workers();  // runs what was queued, then joins
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  void submit(std::function<void()> job);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ethost::lane
