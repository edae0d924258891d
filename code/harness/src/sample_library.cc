#include "sample_library.h"

#include <exception>
#include <utility>

namespace py = pybind11;

namespace harness {

SampleLibrary::SampleLibrary(std::size_t total_sample_count, std::size_t performance_sample_count,
                             py::object load_samples, py::object unload_samples, ErrorState* errors)
    : total_sample_count_(total_sample_count),
      performance_sample_count_(performance_sample_count),
      load_samples_(std::move(load_samples)),
      unload_samples_(std::move(unload_samples)),
      errors_(errors) {}

void SampleLibrary::Call(const py::object& callback, const std::vector<mlperf::QuerySampleIndex>& samples,
                         const char* what) {
  if (callback.is_none() || errors_->Failed()) return;
  py::gil_scoped_acquire gil;
  try {
    py::list indices(samples.size());
    for (std::size_t i = 0; i < samples.size(); ++i) indices[i] = py::int_(samples[i]);
    callback(indices);
  } catch (py::error_already_set& error) {
    errors_->RecordPython(error, what);
  } catch (const std::exception& error) {
    errors_->RecordMessage(error.what(), what);
  }
}

void SampleLibrary::LoadSamplesToRam(const std::vector<mlperf::QuerySampleIndex>& samples) {
  Call(load_samples_, samples, "load_samples");
}

void SampleLibrary::UnloadSamplesFromRam(const std::vector<mlperf::QuerySampleIndex>& samples) {
  Call(unload_samples_, samples, "unload_samples");
}

}  // namespace harness
