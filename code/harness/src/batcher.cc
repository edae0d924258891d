#include "batcher.h"

#include <algorithm>
#include <utility>

namespace harness {

Batcher::Batcher(BatcherConfig config, std::vector<std::int64_t> sample_lengths, BatchHandler handler,
                 WorkerHooks hooks)
    : config_(config),
      sample_lengths_(std::move(sample_lengths)),
      handler_(std::move(handler)),
      hooks_(std::move(hooks)),
      in_flight_(std::max<std::size_t>(1, config.num_devices), 0),
      waiting_(std::max<std::size_t>(1, config.num_devices), 0) {}

Batcher::~Batcher() { Stop(); }

void Batcher::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = false;
  const std::size_t devices = in_flight_.size();
  workers_.reserve(config_.num_workers * devices);
  // Round robin over the devices, so the first batches of an Offline query go to different devices.
  for (std::size_t i = 0; i < config_.num_workers * devices; ++i) {
    workers_.emplace_back([this, device = i % devices] {
      if (hooks_.on_start) hooks_.on_start();
      WorkerLoop(device);
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
  WakeWorkers(samples.size() > 1);
}

void Batcher::WakeWorkers(bool many) {
  if (many || in_flight_.size() > 1) {
    cv_.notify_all();
  } else {
    cv_.notify_one();
  }
}

bool Batcher::MayTakeLocked(std::size_t device) const {
  if (queue_.empty()) return false;
  for (std::size_t other = 0; other < in_flight_.size(); ++other) {
    if (waiting_[other] > 0 && in_flight_[other] < in_flight_[device]) return false;
  }
  return true;
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

void Batcher::WorkerLoop(std::size_t device) {
  std::vector<mlperf::QuerySample> batch;
  batch.reserve(config_.max_batch_size);
  const bool fill_with_timeout = config_.scenario == Scenario::kServer && config_.batch_timeout.count() > 0;
  for (;;) {
    batch.clear();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ++waiting_[device];
      cv_.wait(lock, [this, device] { return (stopping_ && queue_.empty()) || MayTakeLocked(device); });
      --waiting_[device];
      if (queue_.empty()) return;  // stopping, and nothing left to do
      ++in_flight_[device];
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
      if (more_waiting) WakeWorkers(false);  // another worker can start on the rest now
    }
    handler_(device, batch);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --in_flight_[device];
    }
    // This device is less loaded now: a worker of it that waits may be the one allowed to take queued work.
    if (in_flight_.size() > 1) cv_.notify_all();
  }
}

}  // namespace harness
