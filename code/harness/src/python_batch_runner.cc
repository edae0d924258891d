#include "python_batch_runner.h"

#include <loadgen.h>
#include <pybind11/numpy.h>

#include <cstring>
#include <exception>
#include <sstream>
#include <string>
#include <utility>

#include "timeline.h"

namespace py = pybind11;

namespace harness {
namespace {

std::string ShapeOf(const py::array& array) {
  std::ostringstream out;
  out << "(";
  for (py::ssize_t d = 0; d < array.ndim(); ++d) out << (d ? ", " : "") << array.shape(d);
  out << (array.ndim() == 1 ? ",)" : ")");
  return out.str();
}

// A C-contiguous view of an array-like (copies only when it is not contiguous already). Throws on failure.
py::array ContiguousArray(const py::handle& item, std::size_t position) {
  py::array array = py::array::ensure(item, py::array::c_style);
  if (!array) {
    throw std::runtime_error("run_batch returned an item that is not a numpy array at position " +
                             std::to_string(position) + " (type " +
                             std::string(py::str(py::type::of(item).attr("__name__"))) + ")");
  }
  return array;
}

std::vector<std::uint8_t> BytesOf(const py::array& array) {
  const auto* data = static_cast<const std::uint8_t*>(array.data());
  return std::vector<std::uint8_t>(data, data + array.nbytes());
}

// Accepts either one array per sample (any sequence of arrays) or one array whose first dimension is the batch.
std::vector<std::vector<std::uint8_t>> ResponsesFrom(const py::object& result, std::size_t batch_size) {
  std::vector<std::vector<std::uint8_t>> responses;
  responses.reserve(batch_size);
  if (py::isinstance<py::array>(result)) {
    py::array stacked = ContiguousArray(result, 0);
    if (stacked.ndim() == 0 || static_cast<std::size_t>(stacked.shape(0)) != batch_size) {
      throw std::runtime_error("run_batch returned one array of shape " + ShapeOf(stacked) + " for a batch of " +
                               std::to_string(batch_size) +
                               " samples; its first dimension must be the batch size (or return one array per "
                               "sample)");
    }
    const auto* data = static_cast<const std::uint8_t*>(stacked.data());
    const std::size_t per_sample = static_cast<std::size_t>(stacked.nbytes()) / batch_size;
    for (std::size_t i = 0; i < batch_size; ++i) {
      responses.emplace_back(data + i * per_sample, data + (i + 1) * per_sample);
    }
    return responses;
  }
  if (!py::isinstance<py::sequence>(result) || py::isinstance<py::str>(result) || py::isinstance<py::bytes>(result)) {
    throw std::runtime_error(
        "run_batch must return a sequence of numpy arrays (one per sample) or one numpy array "
        "whose first dimension is the batch, not " +
        std::string(py::str(py::type::of(result).attr("__name__"))));
  }
  py::sequence items = py::reinterpret_borrow<py::sequence>(result);
  if (items.size() != batch_size) {
    throw std::runtime_error("run_batch returned " + std::to_string(items.size()) + " responses for a batch of " +
                             std::to_string(batch_size) + " samples");
  }
  for (std::size_t i = 0; i < batch_size; ++i) responses.push_back(BytesOf(ContiguousArray(items[i], i)));
  return responses;
}

}  // namespace

namespace {
struct WorkerThreadState {
  PyGILState_STATE gil_state;
  PyThreadState* thread_state = nullptr;
};
thread_local WorkerThreadState t_worker;
}  // namespace

void PythonBatchRunner::AttachWorkerThread() {
  t_worker.gil_state = PyGILState_Ensure();     // creates this thread's Python thread state, takes the GIL
  t_worker.thread_state = PyEval_SaveThread();  // releases the GIL, keeps the thread state
}

void PythonBatchRunner::DetachWorkerThread() {
  if (t_worker.thread_state == nullptr) return;
  PyEval_RestoreThread(t_worker.thread_state);
  PyGILState_Release(t_worker.gil_state);  // deletes the thread state, releases the GIL
  t_worker.thread_state = nullptr;
}

PythonBatchRunner::PythonBatchRunner(const py::object& runner, ErrorState* errors, std::size_t device,
                                     std::string where)
    : run_batch_(runner.attr("run_batch")), errors_(errors), device_(device), where_(std::move(where)) {}

bool PythonBatchRunner::CallRunner(const std::vector<mlperf::QuerySample>& batch,
                                   std::vector<std::vector<std::uint8_t>>* responses) {
  py::gil_scoped_acquire gil;
  if (errors_->Failed()) return false;  // another worker failed while this one waited for the GIL
  try {
    py::array_t<std::int64_t> indices(static_cast<py::ssize_t>(batch.size()));
    auto view = indices.mutable_unchecked<1>();
    for (std::size_t i = 0; i < batch.size(); ++i) view(static_cast<py::ssize_t>(i)) = batch[i].index;
    py::object result = run_batch_(indices);
    *responses = ResponsesFrom(result, batch.size());
    return true;
  } catch (py::error_already_set& error) {
    errors_->RecordPython(error, where_);
  } catch (const std::exception& error) {
    errors_->RecordMessage(error.what(), where_);
  }
  return false;
}

void PythonBatchRunner::RunBatch(const std::vector<mlperf::QuerySample>& batch) {
  std::vector<std::vector<std::uint8_t>> buffers;
  if (errors_->Failed() || !CallRunner(batch, &buffers)) {
    CompleteWithEmptyResponses(batch, device_);
    return;
  }
  // The GIL is released here; the buffers outlive QuerySamplesComplete, which copies what it logs.
  std::vector<mlperf::QuerySampleResponse> responses;
  responses.reserve(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto address = buffers[i].empty() ? 0 : reinterpret_cast<std::uintptr_t>(buffers[i].data());
    responses.emplace_back(batch[i].id, address, buffers[i].size());
  }
  CompleteSamples(responses.data(), responses.size(), device_);
}

}  // namespace harness
