// What both continuous-batching drivers share: the in-process one (ContinuousSession) and a worker's (WorkerEngine).
//
// An engine takes samples and completes each one later; the core keeps the samples it holds, so a completion can be
// checked (taken, and named once: LoadGen must never see a sample completed twice) and, when the engine ends early,
// what it held is answered empty so LoadGen can end its test. A greedy engine reports each sample's first token as
// soon as it has it (session.first_tokens); the core remembers which samples did, so their completion does not
// report a first token again.
#pragma once

#include <query_sample.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace harness {

class InFlightSamples {
 public:
  void Add(const std::vector<mlperf::QuerySample>& taken);
  // Marks the ids' first tokens as reported when each is held, not yet marked and named once; otherwise marks none
  // and says why. The caller reports them to LoadGen after the lock is released, so one thread (the engine's) both
  // reports a sample's first token and completes it: no other thread may complete it in between.
  std::string MarkFirstTokens(const std::uint64_t* ids, std::size_t count);
  // Removes the ids when each was taken and is named once; otherwise removes none and says why. `first_reported`
  // gets, per id, whether its first token was reported (MarkFirstTokens).
  std::string Remove(const std::uint64_t* ids, std::size_t count, std::vector<bool>* first_reported);
  std::size_t Size();
  // Completes every sample still held with an empty response (no GIL needed).
  void CompleteAllEmpty(std::size_t device);

 private:
  std::mutex mutex_;
  std::unordered_map<mlperf::ResponseId, bool> ids_;  // held samples -> whether their first token was reported
};

// Why session.take's timeout is not usable ("" when it is a finite number >= 0).
std::string TakeTimeoutProblem(double timeout_s);

// Why an engine's end is wrong: it returned before take said the test was over, or with samples it had taken and not
// completed ("" when neither).
std::string EngineEndProblem(bool closed, std::size_t in_flight);

}  // namespace harness
