// The first error raised by Python code that the core calls (run_batch, the QSL callbacks).
//
// The callbacks run on threads that LoadGen or the batcher own, so an exception cannot propagate to the caller of
// run_test directly: it is recorded here, later work skips Python (see PythonBatchRunner), and run_test re-raises
// it once LoadGen's StartTest has returned.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

namespace harness {

// What run_test raises for a recorded message (a worker's failure, a runner's answer that does not fit its batch):
// Python sees it as _mlperf_harness.DeviceError, a RuntimeError, so a caller tells a device's failure during the
// test from a mistake in run_test's arguments.
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ErrorState {
 public:
  // RecordPython must be called with the GIL held (it keeps the Python error object); RecordMessage needs no GIL.
  // Only the first error is kept: later ones are usually consequences of it.
  // `where` names the callback, and the device when there are several ("run_batch on cuda:1").
  void RecordPython(const pybind11::error_already_set& error, const std::string& where);
  void RecordMessage(const std::string& message, const std::string& where);

  // Cheap, lock-free check used on hot paths (no GIL needed).
  bool Failed() const { return failed_.load(std::memory_order_acquire); }

  // Re-raises the recorded error in the calling Python thread (GIL held); no-op when nothing failed. A Python error
  // gets a note naming where it was raised, so with several devices the failing one is named.
  void RethrowIfFailed();

 private:
  bool ClaimFirst(const std::string& description, const std::string& where);
  static std::string PythonErrorLine(const pybind11::error_already_set& error);

  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  std::optional<pybind11::error_already_set> python_error_;
  std::string message_;
  std::string where_;
};

}  // namespace harness
