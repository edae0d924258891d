// LoadGen's view of the dataset: only counts; the data itself stays in Python.
//
// LoadSamplesToRam / UnloadSamplesFromRam are called by LoadGen (on the thread running StartTest, with the GIL
// released) before and after each performance set; they forward the indices to optional Python callbacks, taking
// the GIL for the call. Exceptions are recorded in ErrorState, never thrown into LoadGen.
#pragma once

#include <pybind11/pybind11.h>
#include <query_sample_library.h>

#include <cstddef>
#include <string>
#include <vector>

#include "error_state.h"

namespace harness {

class SampleLibrary : public mlperf::QuerySampleLibrary {
 public:
  // Construct and destroy with the GIL held (it keeps references to the callbacks). None means "nothing to do".
  SampleLibrary(std::size_t total_sample_count, std::size_t performance_sample_count, pybind11::object load_samples,
                pybind11::object unload_samples, ErrorState* errors);

  const std::string& Name() override { return name_; }
  std::size_t TotalSampleCount() override { return total_sample_count_; }
  std::size_t PerformanceSampleCount() override { return performance_sample_count_; }
  void LoadSamplesToRam(const std::vector<mlperf::QuerySampleIndex>& samples) override;
  void UnloadSamplesFromRam(const std::vector<mlperf::QuerySampleIndex>& samples) override;

 private:
  void Call(const pybind11::object& callback, const std::vector<mlperf::QuerySampleIndex>& samples, const char* what);

  const std::string name_ = "HarnessQSL";
  const std::size_t total_sample_count_;
  const std::size_t performance_sample_count_;
  pybind11::object load_samples_;
  pybind11::object unload_samples_;
  ErrorState* errors_;
};

}  // namespace harness
