#include "batching_sut.h"

#include "timeline.h"

namespace harness {

void BatchingSut::IssueQuery(const std::vector<mlperf::QuerySample>& samples) {
  ProcessTimeline().Issued(samples);
  batcher_->Enqueue(samples);
}

}  // namespace harness
