#include "error_state.h"

#include <iostream>
#include <stdexcept>

namespace harness {

bool ErrorState::ClaimFirst(const std::string& description, const std::string& where) {
  if (failed_.exchange(true, std::memory_order_acq_rel)) return false;
  where_ = where;
  // Said at once, not only when run_test returns: in Server/SingleStream LoadGen keeps issuing until its minimum
  // duration, and whoever watches the run should know why it now answers with empty responses.
  std::cerr << "mlperf_harness: error in " << where << ": " << description
            << "; no more Python calls, the remaining samples are completed with empty responses until LoadGen "
               "ends the test, then run_test re-raises it"
            << std::endl;
  return true;
}

void ErrorState::RecordPython(const pybind11::error_already_set& error, const std::string& where) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (ClaimFirst(PythonErrorLine(error), where)) python_error_.emplace(error);
}

std::string ErrorState::PythonErrorLine(const pybind11::error_already_set& error) {
  // The exception's type and message, without pybind11's "At:" frames: the line says at once what failed, in the
  // words of an error a user fixes (the run's one ERROR line repeats them), and a bug's traceback comes whole
  // when run_test re-raises the exception. The caller holds the GIL.
  try {
    const std::string name = pybind11::str(error.type().attr("__name__"));
    const std::string message = pybind11::str(error.value());
    return message.empty() ? name : name + ": " + message;
  } catch (const std::exception&) {
    return error.what();
  }
}

void ErrorState::RecordMessage(const std::string& message, const std::string& where) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!ClaimFirst(message, where)) return;
  // Messages about a bad answer already name run_batch; others get the callback's name in front.
  message_ = message.rfind(where, 0) == 0 ? message : where + ": " + message;
}

void ErrorState::RethrowIfFailed() {
  if (!Failed()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (python_error_) {
    pybind11::error_already_set error = *python_error_;
    python_error_.reset();
    pybind11::object value = error.value();
    if (pybind11::hasattr(value, "add_note")) value.attr("add_note")("raised in " + where_ + " (mlperf_harness)");
    throw error;  // pybind11 restores the original Python exception (type, message, traceback)
  }
  throw DeviceError(message_);
}

}  // namespace harness
