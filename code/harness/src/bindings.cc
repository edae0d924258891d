// The Python module _mlperf_harness. Its Python face, with argument checks and docs, is code/harness/core.py.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <version.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "continuous_runner.h"
#include "error_state.h"
#include "test_runner.h"
#include "timeline.h"
#include "worker_channel.h"

namespace py = pybind11;

namespace {

// Reads one attribute of a CoreSettings (code/harness/core.py, the one definition of the core's settings, validated
// there) into the RunConfig field of the same name; paths and strings arrive as their str().
template <typename T>
void Read(const py::object& settings, const char* name, T& field) {
  const py::object value = settings.attr(name);
  if constexpr (std::is_same_v<T, std::string>) {
    field = py::str(value).cast<std::string>();
  } else {
    field = value.cast<T>();
  }
}

}  // namespace

PYBIND11_MODULE(_mlperf_harness, m) {
  m.doc() = "C++ core of the MLPerf harness: LoadGen SUT/QSL and the batcher (use code.harness.core)";
  py::register_exception<harness::DeviceError>(m, "DeviceError", PyExc_RuntimeError);

  m.def(
      "run_test",
      [](const py::object& settings,
         const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>& sample_lengths,
         const std::vector<py::object>& runners, const std::vector<std::string>& device_names,
         const py::object& load_samples, const py::object& unload_samples, const std::string& mlperf_conf) {
        harness::RunConfig config;
        Read(settings, "model", config.model);
        Read(settings, "scenario", config.scenario);
        Read(settings, "mode", config.mode);
        Read(settings, "user_conf", config.user_conf);
        Read(settings, "log_dir", config.log_dir);
        Read(settings, "total_sample_count", config.total_sample_count);
        Read(settings, "performance_sample_count", config.performance_sample_count);
        Read(settings, "max_batch_size", config.max_batch_size);
        Read(settings, "num_workers", config.num_workers);
        Read(settings, "sort_by_length", config.sort_by_length);
        Read(settings, "batch_timeout_us", config.batch_timeout_us);
        Read(settings, "log_enable_trace", config.log_enable_trace);
        Read(settings, "token_responses", config.token_responses);
        config.mlperf_conf = mlperf_conf;
        harness::RunTest(config, sample_lengths, runners, device_names, load_samples, unload_samples);
      },
      py::arg("settings"), py::kw_only(), py::arg("sample_lengths"), py::arg("runners"), py::arg("device_names"),
      py::arg("load_samples") = py::none(), py::arg("unload_samples") = py::none(), py::arg("mlperf_conf") = "",
      "Run one LoadGen test (once per process) with the settings of a code.harness.core.CoreSettings and one runner "
      "per device: a Python runner (run_batch or run_continuous) or a worker process's connections (an object with "
      "worker_fds and continuous). Raises a runner's first error after the test ends.");

  py::class_<harness::ContinuousSession>(m, "ContinuousSession",
                                         "The issued-sample queue and completion path of a continuous-batching engine")
      .def("take", &harness::ContinuousSession::Take, py::arg("max_samples"), py::arg("timeout_s"),
           "Up to max_samples issued samples as (ids uint64, QSL indices int64), waiting up to timeout_s for the "
           "first; possibly empty; None once the test is over.")
      .def("complete", &harness::ContinuousSession::Complete, py::arg("ids"), py::arg("responses"),
           "Complete samples with LoadGen: ids from take, one numpy array per sample (its raw bytes are the "
           "response).")
      .def("first_tokens", &harness::ContinuousSession::FirstTokens, py::arg("ids"), py::arg("tokens"),
           "Report samples' first tokens to LoadGen before their completion: ids from take, one int32 token id "
           "each.")
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
           {"FIRST_TOKENS", harness::Message::kFirstTokens},
       }) {
    messages[name] = static_cast<std::uint32_t>(value);
  }
  m.attr("WORKER_MESSAGES") = messages;
  m.attr("WORKER_HEADER_BYTES") = sizeof(harness::MessageHeader);

  m.def("loadgen_version", [] { return mlperf::LoadgenVersion(); }, "The version of the LoadGen compiled in.");
}
