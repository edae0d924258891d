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
#include <string>

namespace harness {

class ErrorState {
 public:
  // Both Record functions must be called with the GIL held (the Python error object and stderr need it).
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

  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  std::optional<pybind11::error_already_set> python_error_;
  std::string message_;
  std::string where_;
};

}  // namespace harness
