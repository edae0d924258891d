#include "continuous_runner.h"

#include <loadgen.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "python_batch_runner.h"
#include "timeline.h"

namespace py = pybind11;

namespace harness {
namespace {

std::vector<std::uint8_t> ResponseBytes(const py::handle& item, std::size_t position) {
  py::array array = py::array::ensure(item, py::array::c_style);
  if (!array) {
    throw std::runtime_error("session.complete: response " + std::to_string(position) + " is not a numpy array (type " +
                             std::string(py::str(py::type::of(item).attr("__name__"))) + ")");
  }
  const auto* data = static_cast<const std::uint8_t*>(array.data());
  return std::vector<std::uint8_t>(data, data + array.nbytes());
}

}  // namespace

py::object ContinuousSession::Take(std::size_t max_samples, double timeout_s) {
  const std::string bad_timeout = TakeTimeoutProblem(timeout_s);
  if (!bad_timeout.empty()) throw py::value_error(bad_timeout);
  std::vector<mlperf::QuerySample> taken;
  bool open = !errors_->Failed();  // another device's engine failed: this one finishes what it holds and returns
  if (open && (max_samples > 0 || timeout_s > 0.0)) {
    py::gil_scoped_release release;
    const auto wait = std::chrono::microseconds(static_cast<std::int64_t>(timeout_s * 1e6));
    open = batcher_->Take(max_samples, wait, &taken);
  }
  if (!open) {
    closed_ = true;
    return py::none();
  }
  py::array_t<std::uint64_t> ids(static_cast<py::ssize_t>(taken.size()));
  py::array_t<std::int64_t> indices(static_cast<py::ssize_t>(taken.size()));
  auto id_view = ids.mutable_unchecked<1>();
  auto index_view = indices.mutable_unchecked<1>();
  for (std::size_t i = 0; i < taken.size(); ++i) {
    id_view(static_cast<py::ssize_t>(i)) = taken[i].id;
    index_view(static_cast<py::ssize_t>(i)) = static_cast<std::int64_t>(taken[i].index);
  }
  in_flight_.Add(taken);
  return py::make_tuple(ids, indices);
}

void ContinuousSession::Complete(const py::array_t<std::uint64_t, py::array::c_style | py::array::forcecast>& ids,
                                 const py::sequence& responses) {
  const auto count = static_cast<std::size_t>(ids.size());
  if (responses.size() != count) {
    throw py::value_error("session.complete: " + std::to_string(count) + " ids but " +
                          std::to_string(responses.size()) + " responses");
  }
  std::vector<std::vector<std::uint8_t>> buffers;
  buffers.reserve(count);
  for (std::size_t i = 0; i < count; ++i) buffers.push_back(ResponseBytes(responses[i], i));
  const std::uint64_t* id_data = ids.data();
  std::vector<bool> first_reported;
  const std::string wrong = in_flight_.Remove(id_data, count, &first_reported);
  if (!wrong.empty()) throw py::value_error("session.complete: " + wrong);
  std::vector<mlperf::QuerySampleResponse> loadgen_responses;
  loadgen_responses.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const auto address = buffers[i].empty() ? 0 : reinterpret_cast<std::uintptr_t>(buffers[i].data());
    loadgen_responses.emplace_back(id_data[i], address, buffers[i].size());
  }
  py::gil_scoped_release release;
  CompleteSamples(loadgen_responses.data(), loadgen_responses.size(), device_, &first_reported);
}

void ContinuousSession::FirstTokens(
    const py::array_t<std::uint64_t, py::array::c_style | py::array::forcecast>& ids,
    const py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>& tokens) {
  const auto count = static_cast<std::size_t>(ids.size());
  if (ids.ndim() != 1 || tokens.ndim() != 1 || static_cast<std::size_t>(tokens.size()) != count) {
    throw py::value_error("session.first_tokens: " + std::to_string(count) + " ids but " +
                          std::to_string(tokens.size()) + " tokens (one int32 token id per sample expected)");
  }
  const std::string wrong = in_flight_.MarkFirstTokens(ids.data(), count);
  if (!wrong.empty()) throw py::value_error("session.first_tokens: " + wrong);
  const std::vector<std::uint64_t> id_copy(ids.data(), ids.data() + count);
  const std::vector<std::int32_t> token_copy(tokens.data(), tokens.data() + count);
  py::gil_scoped_release release;
  ReportFirstTokens(id_copy.data(), token_copy.data(), count);
}

std::size_t ContinuousSession::InFlight() { return in_flight_.Size(); }

void ContinuousSession::CompleteInFlightEmpty() { in_flight_.CompleteAllEmpty(device_); }

ContinuousRunner::ContinuousRunner(const py::object& runner, Batcher* batcher, ErrorState* errors, std::size_t device,
                                   std::string where)
    : run_continuous_(runner.attr("run_continuous")),
      batcher_(batcher),
      errors_(errors),
      device_(device),
      where_(std::move(where)) {
  auto session = std::make_unique<ContinuousSession>(batcher, errors, device);
  session_ = session.get();
  session_object_ = py::cast(std::move(session));
}

ContinuousRunner::~ContinuousRunner() {
  if (thread_.joinable()) {
    py::gil_scoped_release release;
    thread_.join();
  }
}

void ContinuousRunner::Start() {
  thread_ = std::thread([this] { ThreadMain(); });
}

void ContinuousRunner::Join() {
  if (thread_.joinable()) thread_.join();
}

void ContinuousRunner::ThreadMain() {
  PythonBatchRunner::AttachWorkerThread();
  {
    py::gil_scoped_acquire gil;
    try {
      run_continuous_(session_object_);
      const std::string wrong = EngineEndProblem(session_->Closed(), session_->InFlight());
      if (!wrong.empty()) errors_->RecordMessage(wrong, where_);
    } catch (py::error_already_set& error) {
      errors_->RecordPython(error, where_);
    } catch (const std::exception& error) {
      errors_->RecordMessage(error.what(), where_);
    }
  }
  PythonBatchRunner::DetachWorkerThread();
  // Whatever is taken and not completed, and whatever LoadGen issues until the test ends, gets an empty response.
  session_->CompleteInFlightEmpty();
  AnswerEmptyUntilStopped(batcher_, device_);
}

}  // namespace harness
