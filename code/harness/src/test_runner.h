// One LoadGen test: settings from user.conf, the QSL, the SUT, the batcher's workers, StartTest.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace harness {

// CoreSettings of code/harness/core.py (the one definition of the core's settings) as the core reads them, field by
// field of the same name, plus mlperf_conf, which Python derives from the settings' round.
struct RunConfig {
  std::string model;     // mlperf.conf key: "bert", "gptj", "llama3_1-8b", "llama3_1-8b-edge"
  std::string scenario;  // "Offline", "Server", "SingleStream"
  std::string mode;      // "PerformanceOnly", "AccuracyOnly"
  std::string user_conf;
  // LoadGen built from a source tree that does not compile mlperf.conf in (round v4.1): that mlperf.conf, read
  // before user.conf. Empty for a LoadGen that compiles it in, where a second file would invalidate the run.
  std::string mlperf_conf;
  std::string log_dir;
  std::size_t total_sample_count = 0;
  std::size_t performance_sample_count = 0;
  std::size_t max_batch_size = 1;
  std::size_t num_workers = 1;  // batcher threads per device
  bool sort_by_length = true;
  std::int64_t batch_timeout_us = 0;
  bool log_enable_trace = false;  // LoadGen's mlperf_log_trace.json: off unless asked for (GBs at GPU rates)
  bool token_responses = false;   // responses are int32 token ids: each reports its count (n_tokens) to LoadGen
};

// Called with the GIL held; releases it for the duration of LoadGen's StartTest. Raises the first error of a
// runner or the QSL callbacks after the test ended. Allowed once per process (LoadGen's FromConfig is).
// runners: one per device, all of one kind (run_batch or run_continuous); device_names: one per runner, for errors.
void RunTest(const RunConfig& config,
             const pybind11::array_t<std::int64_t, pybind11::array::c_style | pybind11::array::forcecast>& lengths,
             const std::vector<pybind11::object>& runners, const std::vector<std::string>& device_names,
             const pybind11::object& load_samples, const pybind11::object& unload_samples);

}  // namespace harness
