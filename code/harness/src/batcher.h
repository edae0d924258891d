// Queues the samples LoadGen issues and hands them, in batches, to worker threads.
//
// Enqueue runs on LoadGen's issue thread and never touches Python or the GIL, so issuing stays cheap and LoadGen's
// timing is not disturbed by whatever Python is doing. Each worker thread takes up to max_batch_size waiting samples
// and calls the batch handler (which acquires the GIL itself, see PythonBatchRunner).
//
// Policies, by scenario:
//   Offline       the single query is sorted (longest first when sort_by_length) and cut, in that order, into
//                 batches of max_batch_size; similar lengths share a batch, so padding is small.
//   Server        dynamic batching: a worker takes whatever is waiting (up to max_batch_size); with batch_timeout
//                 > 0, once it holds a sample it waits at most that long for more to fill the batch.
//   SingleStream  whatever is waiting (one query of one sample at a time, so normally 1).
//
// Several devices (one runner each): num_workers threads per device all take from the one queue, so a device takes
// work only when one of its workers is free (work stealing: a faster device takes more, and Offline balances by the
// time batches take, not by their count). A waiting worker takes a batch only if no other device with a waiting
// worker has fewer batches in flight, so each batch goes to the least loaded device that can start it now.
//
// With num_workers = 0 no worker thread runs: continuous-batching engines (one per device) pull samples themselves
// with Take (see ContinuousRunner), as many as each has room for at each step.
#pragma once

#include <loadgen.h>
#include <query_sample.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace harness {

enum class Scenario { kSingleStream, kServer, kOffline };

struct BatcherConfig {
  Scenario scenario = Scenario::kOffline;
  std::size_t max_batch_size = 1;
  std::size_t num_workers = 1;  // per device
  std::size_t num_devices = 1;
  bool sort_by_length = true;
  std::chrono::microseconds batch_timeout{0};  // Server only
};

// Called on a worker thread of `device` (0..num_devices-1), without the GIL, with 1..max_batch_size samples; must
// complete every one of them.
using BatchHandler = std::function<void(std::size_t device, const std::vector<mlperf::QuerySample>&)>;

// Optional, called on each worker thread when it starts and just before it exits (e.g. to give the thread one
// Python thread state for its whole life).
struct WorkerHooks {
  std::function<void()> on_start;
  std::function<void()> on_exit;
};

class Batcher {
 public:
  // sample_lengths[i] is the length of QSL sample i (used only to sort); copied, so no Python object is needed later.
  Batcher(BatcherConfig config, std::vector<std::int64_t> sample_lengths, BatchHandler handler, WorkerHooks hooks = {});
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  void Start();
  // Lets the workers finish what is queued, then joins them. Idempotent. Call without the GIL: a worker may need it.
  void Stop();

  // Called from BatchingSut::IssueQuery (LoadGen's thread). Sorts the query if asked, then queues it.
  void Enqueue(const std::vector<mlperf::QuerySample>& samples);

  // For a pulling engine: waits up to `wait` for a sample, then moves up to max_samples queued samples into out.
  // Returns false once Stop was called and the queue is empty (the test is over), true otherwise (out may be empty
  // when the wait ran out).
  bool Take(std::size_t max_samples, std::chrono::microseconds wait, std::vector<mlperf::QuerySample>* out);

 private:
  void WorkerLoop(std::size_t device);
  // Whether a waiting worker of `device` may take work now: work is queued and no device with a waiting worker has
  // fewer batches in flight.
  bool MayTakeLocked(std::size_t device) const;
  // Wakes the workers that may take what is queued: one when there is one device, else all (each checks
  // MayTakeLocked, so the least loaded device's worker takes it).
  void WakeWorkers(bool many);
  // moves queued samples into batch, up to limit samples in all
  void TakeLocked(std::vector<mlperf::QuerySample>* batch, std::size_t limit);
  std::int64_t LengthOf(const mlperf::QuerySample& sample) const;

  const BatcherConfig config_;
  const std::vector<std::int64_t> sample_lengths_;
  const BatchHandler handler_;
  const WorkerHooks hooks_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<mlperf::QuerySample> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
  std::vector<std::size_t> in_flight_;  // per device: batches its workers are running
  std::vector<std::size_t> waiting_;    // per device: workers waiting for work
};

}  // namespace harness
