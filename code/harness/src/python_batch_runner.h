// Runs one batch on the Python runner and completes its samples with LoadGen.
//
// Called on a batcher worker thread without the GIL. It acquires the GIL only for the Python call and for copying
// the response bytes out of the returned numpy arrays, then releases it before QuerySamplesComplete, so LoadGen's
// bookkeeping never waits on Python and other workers can enter Python meanwhile.
#pragma once

#include <pybind11/pybind11.h>
#include <query_sample.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "device_runner.h"
#include "error_state.h"

namespace harness {

class PythonBatchRunner : public BatchRunner {
 public:
  // Must be constructed and destroyed with the GIL held (it keeps a reference to runner.run_batch). `device` is the
  // runner's index (its completions are counted for it); `where` names it in errors ("run_batch on cuda:1").
  PythonBatchRunner(const pybind11::object& runner, ErrorState* errors, std::size_t device, std::string where);

  void RunBatch(const std::vector<mlperf::QuerySample>& batch) override;

  // Worker hooks: give each worker thread one Python thread state for its whole life (created at start, without
  // keeping the GIL; deleted at exit, which takes the GIL briefly). Without them, every batch would create and
  // delete a thread state, and a runner's threading.local data would not survive from one batch to the next.
  static void AttachWorkerThread();
  static void DetachWorkerThread();

 private:
  // Returns false (and records why) when the runner failed or its answer does not fit the batch.
  bool CallRunner(const std::vector<mlperf::QuerySample>& batch, std::vector<std::vector<std::uint8_t>>* responses);

  pybind11::object run_batch_;
  ErrorState* errors_;
  std::size_t device_;
  std::string where_;
};

}  // namespace harness
