// A device whose backend runs in a worker process (code/harness/workers.py): the core's side of its sockets.
//
// Nothing here calls Python: batches go out as QSL indices and responses come back as bytes that are handed to
// LoadGen from the buffer they were read into. A worker that reports an error, or whose connection closes (it
// was killed, ran out of memory, crashed), is recorded in ErrorState with its device named; from then on every
// sample, of every device, is completed with an empty response until LoadGen ends the test, as for an in-process
// runner's error.
#pragma once

#include <query_sample.h>

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "batcher.h"
#include "device_runner.h"
#include "error_state.h"
#include "in_flight.h"
#include "worker_channel.h"

namespace harness {

// Static batching. The worker serves one batch per connection at a time; the device's batcher threads (as many
// as its connections) each take a free connection for their batch, so a worker runs as many batches at once as
// the device has batcher threads, as an in-process runner does.
class WorkerBatchRunner : public BatchRunner {
 public:
  // `fds`: the worker's connections (the LoadGen process keeps them open for the test). `where` names the device
  // in errors ("run_batch on cuda:1 (device 2 of 2)").
  WorkerBatchRunner(const std::vector<int>& fds, ErrorState* errors, std::size_t device, std::string where);

  void RunBatch(const std::vector<mlperf::QuerySample>& batch) override;

 private:
  // Sends the batch and reads the worker's answer into payload; false (recorded in errors_) on any failure.
  bool Exchange(WorkerChannel* channel, const std::vector<mlperf::QuerySample>& batch,
                std::vector<std::uint8_t>* payload);
  WorkerChannel* Acquire();
  void Release(WorkerChannel* channel);

  std::vector<std::unique_ptr<WorkerChannel>> channels_;
  std::mutex mutex_;
  std::condition_variable free_cv_;
  std::vector<WorkerChannel*> free_;
  ErrorState* errors_;
  std::size_t device_;
  std::string where_;
};

// Continuous batching. The worker's engine asks for samples (kTake) whenever it has room and completes each one
// when done (kComplete), a greedy engine its first tokens before that (kFirstTokens); a thread here answers its
// requests from the batcher's queue for the whole test.
class WorkerEngine : public EngineDriver {
 public:
  WorkerEngine(int fd, Batcher* batcher, ErrorState* errors, std::size_t device, std::string where);
  ~WorkerEngine() override;

  void Start() override;
  void Join() override;

 private:
  void ThreadMain();
  // Each returns false when the conversation ends (recorded in errors_ unless the engine finished as it should).
  bool AnswerTake(const MessageHeader& header, const std::vector<std::uint8_t>& payload);
  bool Complete(const MessageHeader& header, const std::vector<std::uint8_t>& payload);
  bool FirstTokens(const MessageHeader& header, const std::vector<std::uint8_t>& payload);
  void Fail(const std::string& message);

  WorkerChannel channel_;
  Batcher* batcher_;
  ErrorState* errors_;
  std::size_t device_;
  std::string where_;
  InFlightSamples in_flight_;
  bool closed_ = false;  // the engine was told the test is over
  std::thread thread_;
};

}  // namespace harness
