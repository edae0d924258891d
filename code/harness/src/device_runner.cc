#include "device_runner.h"

#include <chrono>
#include <cstdint>

#include "timeline.h"

namespace harness {

void CompleteWithEmptyResponses(const std::vector<mlperf::QuerySample>& batch, std::size_t device) {
  std::vector<mlperf::QuerySampleResponse> responses;
  responses.reserve(batch.size());
  for (const auto& sample : batch) responses.emplace_back(sample.id, 0, 0);
  CompleteSamples(responses.data(), responses.size(), device);
}

void AnswerEmptyUntilStopped(Batcher* batcher, std::size_t device) {
  std::vector<mlperf::QuerySample> rest;
  while (batcher->Take(SIZE_MAX, std::chrono::milliseconds(50), &rest)) {
    if (!rest.empty()) CompleteWithEmptyResponses(rest, device);
  }
}

}  // namespace harness
