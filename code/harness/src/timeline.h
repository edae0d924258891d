// Per-sample issue and completion times, kept by the harness itself: LoadGen's trace is off by default (it grows by
// GBs at GPU rates), and live progress needs counters Python can read while LoadGen runs.
//
// Issued runs on LoadGen's issue thread, Completed on whichever thread completes samples; both take one mutex for a
// few map operations, which costs far less than LoadGen's own bookkeeping of the same samples. One test per process
// (LoadGen's FromConfig rule), so one timeline per process.
#pragma once

#include <query_sample.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace harness {

struct ProgressCounters {
  std::uint64_t issued = 0;
  std::uint64_t completed = 0;
  std::uint64_t late = 0;                          // completed after the latency bound (0: no bound given)
  double elapsed_s = 0.0;                          // since the test started
  std::vector<std::uint64_t> completed_by_device;  // one count per device
};

struct SampleRecord {
  std::uint64_t index;     // QSL index
  std::int64_t issued_ns;  // since the test started
  std::int64_t completed_ns;
  std::uint32_t device;  // which device's runner completed it (0..devices-1)
};

class Timeline {
 public:
  // Forgets everything; the clock starts now. late_bound_ns <= 0: no sample counts as late.
  void Start(std::int64_t late_bound_ns, std::size_t devices);
  void Issued(const std::vector<mlperf::QuerySample>& samples);
  void Completed(const mlperf::QuerySampleResponse* responses, std::size_t count, std::size_t device);
  ProgressCounters Read();
  std::vector<SampleRecord> Records();

 private:
  std::int64_t Now() const;

  std::mutex mutex_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::int64_t late_bound_ns_ = 0;
  std::unordered_map<mlperf::ResponseId, SampleRecord> pending_;  // issued, not completed
  std::vector<SampleRecord> done_;
  std::uint64_t issued_ = 0;
  std::uint64_t late_ = 0;
  std::vector<std::uint64_t> completed_by_device_;
};

Timeline& ProcessTimeline();

// Records the completions (by `device`'s runner) in the process timeline, then hands them to LoadGen
// (QuerySamplesComplete). Every completion in the core goes through here; with token responses on, each response
// first gets its token count (n_tokens: its bytes / 4, int32 token ids), which LoadGen's token latencies and the
// TEST06 audit read, and each response whose first token was not reported yet (`first_reported`, per response;
// null: none was) reports its first token now.
void CompleteSamples(mlperf::QuerySampleResponse* responses, std::size_t count, std::size_t device,
                     const std::vector<bool>* first_reported = nullptr);

// Reports samples' first tokens (one int32 token id each) to LoadGen (FirstTokenComplete), which times the first
// token from them; nothing when token responses are off (LoadGen then keeps no token latencies).
void ReportFirstTokens(const std::uint64_t* ids, const std::int32_t* tokens, std::size_t count);

// Whether this process's responses are int32 token ids whose count LoadGen must get (llama3.1-8b: mlperf.conf's
// use_token_latencies). Set by RunTest from RunConfig::token_responses before LoadGen starts.
void SetTokenResponses(bool on);

}  // namespace harness
