// The Python module _mlperf_harness. Its Python face, with argument checks and docs, is code/harness/core.py.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <version.h>

#include <cstdint>
#include <string>
#include <vector>

#include "continuous_runner.h"
#include "error_state.h"
#include "test_runner.h"
#include "timeline.h"
#include "worker_channel.h"

namespace py = pybind11;

PYBIND11_MODULE(_mlperf_harness, m) {
  m.doc() = "C++ core of the MLPerf harness: LoadGen SUT/QSL and the batcher (use code.harness.core)";
  py::register_exception<harness::DeviceError>(m, "DeviceError", PyExc_RuntimeError);

  m.def(
      "run_test",
      [](const std::string& model, const std::string& scenario, const std::string& mode, const std::string& user_conf,
         const std::string& log_dir, std::size_t total_sample_count, std::size_t performance_sample_count,
         std::size_t max_batch_size, std::size_t num_workers, bool sort_by_length, std::int64_t batch_timeout_us,
         bool log_enable_trace,
         const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>& sample_lengths,
         const std::vector<py::object>& runners, const std::vector<std::string>& device_names,
         const py::object& load_samples, const py::object& unload_samples, const std::string& mlperf_conf) {
        harness::RunConfig config;
        config.model = model;
        config.scenario = scenario;
        config.mode = mode;
        config.user_conf = user_conf;
        config.mlperf_conf = mlperf_conf;
        config.log_dir = log_dir;
        config.total_sample_count = total_sample_count;
        config.performance_sample_count = performance_sample_count;
        config.max_batch_size = max_batch_size;
        config.num_workers = num_workers;
        config.sort_by_length = sort_by_length;
        config.batch_timeout_us = batch_timeout_us;
        config.enable_trace = log_enable_trace;
        harness::RunTest(config, sample_lengths, runners, device_names, load_samples, unload_samples);
      },
      py::kw_only(), py::arg("model"), py::arg("scenario"), py::arg("mode"), py::arg("user_conf"), py::arg("log_dir"),
      py::arg("total_sample_count"), py::arg("performance_sample_count"), py::arg("max_batch_size"),
      py::arg("num_workers"), py::arg("sort_by_length"), py::arg("batch_timeout_us"), py::arg("log_enable_trace"),
      py::arg("sample_lengths"), py::arg("runners"), py::arg("device_names"), py::arg("load_samples") = py::none(),
      py::arg("unload_samples") = py::none(), py::arg("mlperf_conf") = "",
      "Run one LoadGen test (once per process) with one runner per device: a Python runner (run_batch or "
      "run_continuous) or a worker process's connections (an object with worker_fds and continuous). Raises a "
      "runner's first error after the test ends.");

  py::class_<harness::ContinuousSession>(m, "ContinuousSession",
                                         "The issued-sample queue and completion path of a continuous-batching engine")
      .def("take", &harness::ContinuousSession::Take, py::arg("max_samples"), py::arg("timeout_s"),
           "Up to max_samples issued samples as (ids uint64, QSL indices int64), waiting up to timeout_s for the "
           "first; possibly empty; None once the test is over.")
      .def("complete", &harness::ContinuousSession::Complete, py::arg("ids"), py::arg("responses"),
           "Complete samples with LoadGen: ids from take, one numpy array per sample (its raw bytes are the "
           "response).")
      .def("in_flight", &harness::ContinuousSession::InFlight, "Samples taken and not yet completed.");

  m.def(
      "progress",
      [] {
        const harness::ProgressCounters counters = harness::ProcessTimeline().Read();
        py::dict out;
        out["issued"] = counters.issued;
        out["completed"] = counters.completed;
        out["late"] = counters.late;
        out["elapsed_s"] = counters.elapsed_s;
        out["completed_by_device"] = counters.completed_by_device;
        return out;
      },
      "Counters of the running test (callable from another thread while run_test runs): issued, completed, late "
      "(Server: past the latency bound), elapsed_s, completed_by_device (a list, one count per device).");

  m.def(
      "timeline",
      [] {
        const std::vector<harness::SampleRecord> records = harness::ProcessTimeline().Records();
        const auto count = static_cast<py::ssize_t>(records.size());
        py::array_t<std::int64_t> index(count);
        py::array_t<double> issued(count);
        py::array_t<double> completed(count);
        py::array_t<std::int32_t> device(count);
        auto d_view = device.mutable_unchecked<1>();
        auto i_view = index.mutable_unchecked<1>();
        auto s_view = issued.mutable_unchecked<1>();
        auto c_view = completed.mutable_unchecked<1>();
        for (py::ssize_t i = 0; i < count; ++i) {
          i_view(i) = static_cast<std::int64_t>(records[i].index);
          s_view(i) = static_cast<double>(records[i].issued_ns) * 1e-9;
          c_view(i) = static_cast<double>(records[i].completed_ns) * 1e-9;
          d_view(i) = static_cast<std::int32_t>(records[i].device);
        }
        return py::make_tuple(index, issued, completed, device);
      },
      "The completed samples of the last test, in completion order: (QSL index, issue time s, completion time s, "
      "device index), times since the test started.");

  // The worker protocol's message numbers and header layout, for its Python end (code/harness/workers.py).
  py::dict messages;
  for (const auto& [name, value] : std::initializer_list<std::pair<const char*, harness::Message>>{
           {"BATCH", harness::Message::kBatch},
           {"RESPONSES", harness::Message::kResponses},
           {"ERROR", harness::Message::kError},
           {"TAKE", harness::Message::kTake},
           {"TAKEN", harness::Message::kTaken},
           {"CLOSED", harness::Message::kClosed},
           {"COMPLETE", harness::Message::kComplete},
           {"DONE", harness::Message::kDone},
           {"READY", harness::Message::kReady},
           {"END", harness::Message::kEnd},
           {"STATS", harness::Message::kStats},
           {"HELLO", harness::Message::kHello},
       }) {
    messages[name] = static_cast<std::uint32_t>(value);
  }
  m.attr("WORKER_MESSAGES") = messages;
  m.attr("WORKER_HEADER_BYTES") = sizeof(harness::MessageHeader);

  m.def("loadgen_version", [] { return mlperf::LoadgenVersion(); }, "The version of the LoadGen compiled in.");
}
