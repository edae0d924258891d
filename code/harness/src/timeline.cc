#include "timeline.h"

#include <loadgen.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace harness {

void Timeline::Start(std::int64_t late_bound_ns, std::size_t devices) {
  std::lock_guard<std::mutex> lock(mutex_);
  start_ = std::chrono::steady_clock::now();
  late_bound_ns_ = late_bound_ns;
  pending_.clear();
  done_.clear();
  issued_ = 0;
  late_ = 0;
  completed_by_device_.assign(std::max<std::size_t>(1, devices), 0);
}

std::int64_t Timeline::Now() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
}

void Timeline::Issued(const std::vector<mlperf::QuerySample>& samples) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::int64_t now = Now();
  pending_.reserve(pending_.size() + samples.size());
  for (const auto& sample : samples) pending_[sample.id] = SampleRecord{sample.index, now, 0, 0};
  issued_ += samples.size();
}

void Timeline::Completed(const mlperf::QuerySampleResponse* responses, std::size_t count, std::size_t device) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::int64_t now = Now();
  if (device >= completed_by_device_.size()) completed_by_device_.resize(device + 1, 0);
  for (std::size_t i = 0; i < count; ++i) {
    auto found = pending_.find(responses[i].id);
    if (found == pending_.end()) continue;  // issued before Start: not this test's
    SampleRecord record = found->second;
    pending_.erase(found);
    record.completed_ns = now;
    record.device = static_cast<std::uint32_t>(device);
    ++completed_by_device_[device];
    if (late_bound_ns_ > 0 && now - record.issued_ns > late_bound_ns_) ++late_;
    done_.push_back(record);
  }
}

ProgressCounters Timeline::Read() {
  std::lock_guard<std::mutex> lock(mutex_);
  return ProgressCounters{issued_, done_.size(), late_, static_cast<double>(Now()) * 1e-9, completed_by_device_};
}

std::vector<SampleRecord> Timeline::Records() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

Timeline& ProcessTimeline() {
  static Timeline timeline;
  return timeline;
}

namespace {
std::atomic<bool> token_responses{false};
}  // namespace

void SetTokenResponses(bool on) { token_responses.store(on); }

void ReportFirstTokens(const std::uint64_t* ids, const std::int32_t* tokens, std::size_t count) {
  if (!token_responses.load(std::memory_order_relaxed) || count == 0) return;
  std::vector<mlperf::QuerySampleResponse> first_tokens;
  first_tokens.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    first_tokens.push_back({ids[i], reinterpret_cast<std::uintptr_t>(tokens + i), sizeof(std::int32_t), 1});
  }
  mlperf::FirstTokenComplete(first_tokens.data(), first_tokens.size());
}

void CompleteSamples(mlperf::QuerySampleResponse* responses, std::size_t count, std::size_t device,
                     const std::vector<bool>* first_reported) {
  if (token_responses.load(std::memory_order_relaxed)) {
    // LoadGen's token latencies need each sample's first token before its completion, every sample's: LoadGen
    // indexes its token records by sample, so an empty response (a failed batch) reports an empty first token.
    // A sample whose engine did not stream its first token (batch backends, beam search, whose first token is
    // known only at the end) reports it with the response: its time to first token is its whole latency.
    std::vector<mlperf::QuerySampleResponse> first_tokens;
    first_tokens.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      const std::int64_t n_tokens = static_cast<std::int64_t>(responses[i].size / sizeof(std::int32_t));
      responses[i].n_tokens = n_tokens;
      if (first_reported != nullptr && (*first_reported)[i]) continue;
      first_tokens.push_back(
          {responses[i].id, responses[i].data, n_tokens > 0 ? sizeof(std::int32_t) : 0, n_tokens > 0 ? 1 : 0});
    }
    if (!first_tokens.empty()) mlperf::FirstTokenComplete(first_tokens.data(), first_tokens.size());
  }
  ProcessTimeline().Completed(responses, count, device);
  mlperf::QuerySamplesComplete(responses, count);
}

}  // namespace harness
