#include "batcher.h"

#include <algorithm>
#include <utility>

namespace harness {

Batcher::Batcher(BatcherConfig config, std::vector<std::int64_t> sample_lengths, BatchHandler handler,
                 WorkerHooks hooks)
    : config_(config),
      sample_lengths_(std::move(sample_lengths)),
      handler_(std::move(handler)),
      hooks_(std::move(hooks)) {}

Batcher::~Batcher() { Stop(); }

void Batcher::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = false;
  workers_.reserve(config_.num_workers);
  for (std::size_t i = 0; i < config_.num_workers; ++i) {
    workers_.emplace_back([this] {
      if (hooks_.on_start) hooks_.on_start();
      WorkerLoop();
      if (hooks_.on_exit) hooks_.on_exit();
    });
  }
}

void Batcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
  workers_.clear();
}

std::int64_t Batcher::LengthOf(const mlperf::QuerySample& sample) const {
  return sample.index < sample_lengths_.size() ? sample_lengths_[sample.index] : 0;
}

void Batcher::Enqueue(const std::vector<mlperf::QuerySample>& samples) {
  if (samples.empty()) return;
  if (config_.sort_by_length && samples.size() > 1) {
    std::vector<mlperf::QuerySample> sorted(samples);
    // Stable: equal lengths keep LoadGen's order, so a run is reproducible.
    std::stable_sort(sorted.begin(), sorted.end(), [this](const mlperf::QuerySample& a, const mlperf::QuerySample& b) {
      return LengthOf(a) > LengthOf(b);
    });
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.insert(queue_.end(), sorted.begin(), sorted.end());
  } else {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.insert(queue_.end(), samples.begin(), samples.end());
  }
  if (samples.size() > 1) {
    cv_.notify_all();
  } else {
    cv_.notify_one();
  }
}

void Batcher::TakeLocked(std::vector<mlperf::QuerySample>* batch, std::size_t limit) {
  while (!queue_.empty() && batch->size() < limit) {
    batch->push_back(queue_.front());
    queue_.pop_front();
  }
}

bool Batcher::Take(std::size_t max_samples, std::chrono::microseconds wait, std::vector<mlperf::QuerySample>* out) {
  out->clear();
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait_for(lock, wait, [this] { return stopping_ || !queue_.empty(); });
  if (queue_.empty()) return !stopping_;
  TakeLocked(out, max_samples);
  return true;
}

void Batcher::WorkerLoop() {
  std::vector<mlperf::QuerySample> batch;
  batch.reserve(config_.max_batch_size);
  const bool fill_with_timeout = config_.scenario == Scenario::kServer && config_.batch_timeout.count() > 0;
  for (;;) {
    batch.clear();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to do
      TakeLocked(&batch, config_.max_batch_size);
      if (fill_with_timeout && batch.size() < config_.max_batch_size) {
        const auto deadline = std::chrono::steady_clock::now() + config_.batch_timeout;
        while (batch.size() < config_.max_batch_size && !stopping_) {
          if (!cv_.wait_until(lock, deadline, [this] { return stopping_ || !queue_.empty(); })) break;
          TakeLocked(&batch, config_.max_batch_size);
        }
      }
      const bool more_waiting = !queue_.empty();
      lock.unlock();
      if (more_waiting) cv_.notify_one();  // another worker can start on the rest now
    }
    handler_(batch);
  }
}

}  // namespace harness
