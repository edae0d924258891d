// How the core drives one device, whatever runs it: a Python runner in the LoadGen process, or a worker process at
// the other end of a socket (worker_runners.h). The batcher and the test know only these two interfaces.
#pragma once

#include <query_sample.h>

#include <cstddef>
#include <vector>

#include "batcher.h"

namespace harness {

// Static batching: called on a batcher worker thread of the device, without the GIL, with 1..max_batch_size
// samples; completes every one of them (with empty responses after an error).
class BatchRunner {
 public:
  virtual ~BatchRunner() = default;
  virtual void RunBatch(const std::vector<mlperf::QuerySample>& batch) = 0;
};

// Continuous batching: the engine pulls samples from the batcher's queue on its own thread for the whole test.
// Start before LoadGen starts; Join after the batcher stopped (which tells the engine the test is over). Both
// without the GIL.
class EngineDriver {
 public:
  virtual ~EngineDriver() = default;
  virtual void Start() = 0;
  virtual void Join() = 0;
};

// After an error: no runner is called any more, but LoadGen needs every issued sample completed to end its test.
void CompleteWithEmptyResponses(const std::vector<mlperf::QuerySample>& batch, std::size_t device);

// The end of an engine that failed or returned: answers whatever LoadGen issues until the batcher stops, each
// sample with an empty response (no GIL needed).
void AnswerEmptyUntilStopped(Batcher* batcher, std::size_t device);

}  // namespace harness
