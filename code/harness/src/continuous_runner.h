// Runs a continuous-batching engine: one thread calls the Python runner's run_continuous(session) once, and the
// engine pulls samples and completes them one by one through the session for the whole test.
//
// The engine decides at every step how many samples it has room for (session.take), so new samples join the
// running ones as soon as others finish, in Offline and Server alike; each sample is completed with LoadGen as
// soon as it is done (session.complete), not when its batch is. Completion copies the response bytes with the GIL
// held, then releases the GIL for QuerySamplesComplete, so LoadGen's bookkeeping never waits on Python.
//
// If the engine raises, the error is recorded, every sample it had taken and not completed, and every sample
// issued later, is completed with an empty response so LoadGen can end its test; run_test then re-raises.
//
// Several devices: one engine (and session) per device, all taking from the one queue, so each takes as much as it
// has room for. After one engine's error the others' take returns None: they finish what they hold and return.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <query_sample.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "batcher.h"
#include "device_runner.h"
#include "error_state.h"
#include "in_flight.h"

namespace harness {

// What the engine sees: the queue of issued samples and the way to complete them.
class ContinuousSession {
 public:
  ContinuousSession(Batcher* batcher, ErrorState* errors, std::size_t device)
      : batcher_(batcher), errors_(errors), device_(device) {}

  // Up to max_samples issued samples, waiting up to timeout_s for the first: (response ids uint64, QSL indices
  // int64), possibly empty; None once the test is over and nothing is left (the engine should return). GIL held on
  // entry; released while waiting.
  pybind11::object Take(std::size_t max_samples, double timeout_s);

  // Completes samples: ids as returned by Take, one numpy array per sample whose raw bytes are its response.
  void Complete(const pybind11::array_t<std::uint64_t, pybind11::array::c_style | pybind11::array::forcecast>& ids,
                const pybind11::sequence& responses);

  // Reports samples' first tokens (a greedy engine has each after the step that follows its prompt): ids as
  // returned by Take, one int32 token id each; their completion then reports no first token again.
  void FirstTokens(
      const pybind11::array_t<std::uint64_t, pybind11::array::c_style | pybind11::array::forcecast>& ids,
      const pybind11::array_t<std::int32_t, pybind11::array::c_style | pybind11::array::forcecast>& tokens);

  // Taken and not yet completed.
  std::size_t InFlight();

  // After an error: completes every sample taken and not completed with an empty response (no GIL needed).
  void CompleteInFlightEmpty();

  // Whether Take has said the test is over.
  bool Closed() const { return closed_; }

 private:
  Batcher* batcher_;
  ErrorState* errors_;
  std::size_t device_;
  InFlightSamples in_flight_;
  bool closed_ = false;  // written and read with the GIL held
};

class ContinuousRunner : public EngineDriver {
 public:
  // Must be constructed and destroyed with the GIL held (it keeps a reference to the runner).
  // `device`: the engine's index (its completions are counted for it); `where` names it in errors.
  ContinuousRunner(const pybind11::object& runner, Batcher* batcher, ErrorState* errors, std::size_t device,
                   std::string where);
  ~ContinuousRunner() override;

  void Start() override;
  void Join() override;

 private:
  void ThreadMain();

  pybind11::object run_continuous_;
  pybind11::object session_object_;
  ContinuousSession* session_;  // owned by session_object_
  Batcher* batcher_;
  ErrorState* errors_;
  std::size_t device_;
  std::string where_;
  std::thread thread_;
};

}  // namespace harness
