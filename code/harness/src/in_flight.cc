#include "in_flight.h"

#include <cmath>

#include "timeline.h"

namespace harness {

void InFlightSamples::Add(const std::vector<mlperf::QuerySample>& taken) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& sample : taken) ids_.insert(sample.id);
}

std::string InFlightSamples::Remove(const std::uint64_t* ids, std::size_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::unordered_set<std::uint64_t> named;
  for (std::size_t i = 0; i < count; ++i) {
    if (ids_.count(ids[i]) == 0 || !named.insert(ids[i]).second) {
      return "id " + std::to_string(ids[i]) + " was not taken, or was completed already";
    }
  }
  for (std::size_t i = 0; i < count; ++i) ids_.erase(ids[i]);
  return "";
}

std::size_t InFlightSamples::Size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return ids_.size();
}

void InFlightSamples::CompleteAllEmpty(std::size_t device) {
  std::vector<mlperf::QuerySampleResponse> responses;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto id : ids_) responses.emplace_back(id, 0, 0);
    ids_.clear();
  }
  if (!responses.empty()) CompleteSamples(responses.data(), responses.size(), device);
}

std::string TakeTimeoutProblem(double timeout_s) {
  if (timeout_s >= 0.0 && std::isfinite(timeout_s)) return "";
  return "session.take: timeout_s must be a finite number >= 0, not " + std::to_string(timeout_s);
}

std::string EngineEndProblem(bool closed, std::size_t in_flight) {
  if (!closed) return "run_continuous returned before session.take said the test was over (None)";
  if (in_flight != 0) {
    return "run_continuous returned with " + std::to_string(in_flight) + " samples taken and not completed";
  }
  return "";
}

}  // namespace harness
