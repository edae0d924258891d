#include "in_flight.h"

#include <cmath>
#include <unordered_set>

#include "timeline.h"

namespace harness {

void InFlightSamples::Add(const std::vector<mlperf::QuerySample>& taken) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& sample : taken) ids_.emplace(sample.id, false);
}

std::string InFlightSamples::MarkFirstTokens(const std::uint64_t* ids, std::size_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::unordered_set<std::uint64_t> named;
  for (std::size_t i = 0; i < count; ++i) {
    const auto held = ids_.find(ids[i]);
    if (held == ids_.end() || held->second || !named.insert(ids[i]).second) {
      return "id " + std::to_string(ids[i]) + " was not taken, was completed already or had its first token already";
    }
  }
  for (std::size_t i = 0; i < count; ++i) ids_[ids[i]] = true;
  return "";
}

std::string InFlightSamples::Remove(const std::uint64_t* ids, std::size_t count, std::vector<bool>* first_reported) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::unordered_set<std::uint64_t> named;
  for (std::size_t i = 0; i < count; ++i) {
    if (ids_.count(ids[i]) == 0 || !named.insert(ids[i]).second) {
      return "id " + std::to_string(ids[i]) + " was not taken, or was completed already";
    }
  }
  first_reported->assign(count, false);
  for (std::size_t i = 0; i < count; ++i) {
    (*first_reported)[i] = ids_[ids[i]];
    ids_.erase(ids[i]);
  }
  return "";
}

std::size_t InFlightSamples::Size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return ids_.size();
}

void InFlightSamples::CompleteAllEmpty(std::size_t device) {
  std::vector<mlperf::QuerySampleResponse> responses;
  std::vector<bool> first_reported;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [id, first] : ids_) {
      responses.emplace_back(id, 0, 0);
      first_reported.push_back(first);
    }
    ids_.clear();
  }
  if (!responses.empty()) CompleteSamples(responses.data(), responses.size(), device, &first_reported);
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
