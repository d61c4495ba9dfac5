#include "workers.h"

#include <pthread.h>

#include <string>

namespace ethost::lane {

Workers::Workers(size_t count) {
  for (size_t i = 0; i < count; ++i) {
    threads_.emplace_back([this, i] {
      pthread_setname_np(pthread_self(), ("etrt-lane-w" + std::to_string(i)).substr(0, 15).c_str());
      run();
    });
  }
}

Workers::~Workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void Workers::submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  ready_.notify_one();
}

void Workers::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace ethost::lane
