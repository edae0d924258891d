#include "test_runner.h"

#include <loadgen.h>
#include <pybind11/stl.h>
#include <test_settings.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "batcher.h"
#include "batching_sut.h"
#include "continuous_runner.h"
#include "error_state.h"
#include "python_batch_runner.h"
#include "sample_library.h"
#include "timeline.h"
#include "worker_runners.h"

namespace py = pybind11;

namespace harness {
namespace {

// LoadGen's FromConfig loads the compiled-in mlperf.conf only on its first call in a process; a second call logs
// error_invalid_config, which the submission checker rejects. So one test per process, enforced here.
std::atomic<bool> g_test_started{false};

struct ScenarioNames {
  const char* name;
  Scenario batcher;
  mlperf::TestScenario loadgen;
};
constexpr ScenarioNames kScenarios[] = {
    {"Offline", Scenario::kOffline, mlperf::TestScenario::Offline},
    {"Server", Scenario::kServer, mlperf::TestScenario::Server},
    {"SingleStream", Scenario::kSingleStream, mlperf::TestScenario::SingleStream},
};

const ScenarioNames& ParseScenario(const std::string& name) {
  for (const auto& scenario : kScenarios) {
    if (name == scenario.name) return scenario;
  }
  throw py::value_error("scenario must be one of Offline, Server, SingleStream, not '" + name + "'");
}

mlperf::TestMode ParseMode(const std::string& name) {
  if (name == "PerformanceOnly") return mlperf::TestMode::PerformanceOnly;
  if (name == "AccuracyOnly") return mlperf::TestMode::AccuracyOnly;
  throw py::value_error("mode must be one of PerformanceOnly, AccuracyOnly, not '" + name + "'");
}

void Validate(const RunConfig& config, std::size_t lengths_count, bool continuous) {
  if (config.total_sample_count == 0) throw py::value_error("total_sample_count must be > 0");
  if (config.performance_sample_count == 0 || config.performance_sample_count > config.total_sample_count) {
    throw py::value_error("performance_sample_count must be in 1..total_sample_count");
  }
  if (config.max_batch_size == 0) throw py::value_error("max_batch_size must be > 0");
  if (config.num_workers == 0 && !continuous) throw py::value_error("num_workers must be > 0");
  if (config.batch_timeout_us < 0) throw py::value_error("batch_timeout_us must be >= 0");
  if (lengths_count != config.total_sample_count) {
    throw py::value_error("sample_lengths has " + std::to_string(lengths_count) +
                          " entries; it needs one per QSL sample (total_sample_count = " +
                          std::to_string(config.total_sample_count) + ")");
  }
}

mlperf::TestSettings MakeTestSettings(const RunConfig& config, const ScenarioNames& scenario) {
  mlperf::TestSettings settings;
  // The scenario first: FromConfig reads keys for the scenario it is given, but does not set the field itself.
  settings.scenario = scenario.loadgen;
  auto read = [&](const std::string& path, const char* what) {
    const int rc = settings.FromConfig(path, config.model, config.scenario);
    if (rc == 0) return;
    const std::string why = rc == -ENOENT   ? "cannot open the file"
                            : rc == -EINVAL ? "a line is not 'model.scenario.key = number' (see LoadGen's detail log)"
                                            : std::strerror(-rc);
    throw py::value_error(std::string("LoadGen could not read ") + what + " " + path + ": " + why);
  };
  if (!config.mlperf_conf.empty()) read(config.mlperf_conf, "mlperf.conf");
  read(config.user_conf, "user.conf");
  // After FromConfig, so a "mode" key in user.conf cannot override what the orchestrator asked for.
  settings.scenario = scenario.loadgen;
  settings.mode = ParseMode(config.mode);
  return settings;
}

mlperf::LogSettings MakeLogSettings(const RunConfig& config) {
  // LoadGen does not create its output directory: with a missing one it writes nothing and aborts.
  std::error_code ec;
  std::filesystem::create_directories(config.log_dir, ec);
  if (ec || !std::filesystem::is_directory(config.log_dir)) {
    throw py::value_error("cannot create log_dir " + config.log_dir + ": " + ec.message());
  }
  mlperf::LogSettings log_settings;
  log_settings.log_output.outdir = config.log_dir;
  log_settings.log_output.copy_summary_to_stdout = false;
  log_settings.log_output.copy_detail_to_stdout = false;
  log_settings.enable_trace = config.log_enable_trace;
  return log_settings;
}

std::string WhereOf(const char* callback, const std::vector<std::string>& device_names, std::size_t device) {
  if (device_names.size() <= 1) return callback;
  return std::string(callback) + " on " + device_names[device] + " (device " + std::to_string(device + 1) + " of " +
         std::to_string(device_names.size()) + ")";
}

// What drives one device: a worker process (the runner object carries its socket's file descriptors) or a Python
// runner in this process.
struct DeviceKind {
  bool worker;
  bool continuous;
};

DeviceKind KindOf(const py::object& runner) {
  if (py::hasattr(runner, "worker_fds")) return {true, runner.attr("continuous").cast<bool>()};
  const bool continuous = py::hasattr(runner, "run_continuous");
  if (!continuous && !py::hasattr(runner, "run_batch")) {
    throw py::type_error("runner has neither run_batch nor run_continuous (nor worker_fds)");
  }
  return {false, continuous};
}

}  // namespace

void RunTest(const RunConfig& config,
             const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>& lengths,
             const std::vector<py::object>& runners, const std::vector<std::string>& device_names,
             const py::object& load_samples, const py::object& unload_samples) {
  const ScenarioNames& scenario = ParseScenario(config.scenario);
  ParseMode(config.mode);
  if (runners.empty()) throw py::value_error("runners must hold one runner per device, at least one");
  if (device_names.size() != runners.size()) {
    throw py::value_error("device_names must name each runner's device: " + std::to_string(runners.size()) +
                          " runners, " + std::to_string(device_names.size()) + " names");
  }
  // A continuous runner pulls samples itself (continuous batching); otherwise the batcher's workers hand it
  // batches. All runners of a test are of one kind.
  std::vector<DeviceKind> kinds;
  for (const auto& runner : runners) kinds.push_back(KindOf(runner));
  const bool continuous = kinds[0].continuous;
  for (const auto& kind : kinds) {
    if (kind.continuous != continuous) {
      throw py::type_error("runners mix run_batch and run_continuous; one test runs one kind on every device");
    }
  }
  Validate(config, static_cast<std::size_t>(lengths.size()), continuous);
  SetTokenResponses(config.token_responses);
  std::vector<std::vector<int>> worker_fds(runners.size());
  bool any_python = false;
  for (std::size_t d = 0; d < runners.size(); ++d) {
    if (!kinds[d].worker) {
      any_python = true;
      continue;
    }
    worker_fds[d] = runners[d].attr("worker_fds").cast<std::vector<int>>();
    const std::size_t needed = continuous ? 1 : config.num_workers;
    if (worker_fds[d].size() != needed) {
      throw py::value_error("the worker of " + device_names[d] + " has " + std::to_string(worker_fds[d].size()) +
                            " connections; this test needs " + std::to_string(needed) +
                            (continuous ? " (continuous batching)" : " (one per batcher thread, num_workers)"));
    }
  }
  for (const auto& callback : {load_samples, unload_samples}) {
    if (!callback.is_none() && !PyCallable_Check(callback.ptr())) {
      throw py::type_error("load_samples / unload_samples must be callables or None");
    }
  }
  if (g_test_started.exchange(true)) {
    throw std::runtime_error(
        "run_test may run only once per process: LoadGen's FromConfig reads mlperf.conf only on its first call, and "
        "a second call marks the run invalid (start one process per test)");
  }

  mlperf::TestSettings settings = MakeTestSettings(config, scenario);
  mlperf::LogSettings log_settings = MakeLogSettings(config);

  std::vector<std::int64_t> sample_lengths(lengths.data(), lengths.data() + lengths.size());
  ErrorState errors;
  SampleLibrary qsl(config.total_sample_count, config.performance_sample_count, load_samples, unload_samples, &errors);
  const std::size_t devices = runners.size();
  std::vector<std::unique_ptr<BatchRunner>> batch_runners;
  if (!continuous) {
    for (std::size_t d = 0; d < devices; ++d) {
      const std::string where = WhereOf("run_batch", device_names, d);
      if (kinds[d].worker) {
        batch_runners.push_back(std::make_unique<WorkerBatchRunner>(worker_fds[d], &errors, d, where));
      } else {
        batch_runners.push_back(std::make_unique<PythonBatchRunner>(runners[d], &errors, d, where));
      }
    }
  }
  BatcherConfig batcher_config;
  batcher_config.scenario = scenario.batcher;
  batcher_config.max_batch_size = config.max_batch_size;
  batcher_config.num_workers = continuous ? 0 : config.num_workers;
  batcher_config.num_devices = devices;
  batcher_config.sort_by_length = config.sort_by_length;
  batcher_config.batch_timeout = std::chrono::microseconds(config.batch_timeout_us);
  // Batcher threads get a Python thread state for their life only where a Python runner runs in this process.
  const WorkerHooks hooks = any_python && !continuous ? WorkerHooks{PythonBatchRunner::AttachWorkerThread,
                                                                    PythonBatchRunner::DetachWorkerThread}
                                                      : WorkerHooks{};
  Batcher batcher(
      batcher_config, std::move(sample_lengths),
      [&batch_runners](std::size_t device, const std::vector<mlperf::QuerySample>& batch) {
        batch_runners[device]->RunBatch(batch);
      },
      hooks);
  BatchingSut sut(&batcher);
  std::vector<std::unique_ptr<EngineDriver>> engines;
  if (continuous) {
    for (std::size_t d = 0; d < devices; ++d) {
      const std::string where = WhereOf("run_continuous", device_names, d);
      if (kinds[d].worker) {
        engines.push_back(std::make_unique<WorkerEngine>(worker_fds[d][0], &batcher, &errors, d, where));
      } else {
        engines.push_back(std::make_unique<ContinuousRunner>(runners[d], &batcher, &errors, d, where));
      }
    }
  }

  {
    // Without the GIL: the workers and the QSL callbacks take it when they call Python.
    py::gil_scoped_release release;
    // Server counts a sample late past its latency bound, as LoadGen judges the test; the others have none.
    const bool server = scenario.loadgen == mlperf::TestScenario::Server;
    ProcessTimeline().Start(server ? static_cast<std::int64_t>(settings.server_target_latency_ns) : 0, devices);
    batcher.Start();
    for (auto& engine : engines) engine->Start();
    mlperf::StartTest(&sut, &qsl, settings, log_settings);
    // StartTest returns once every issued sample is complete, so the workers are idle; join them still without the
    // GIL, in case one is about to take it. Stopping the batcher also tells a continuous engine the test is over.
    batcher.Stop();
    for (auto& engine : engines) engine->Join();
  }
  errors.RethrowIfFailed();
}

}  // namespace harness
