#include "batching_sut.h"

namespace harness {

void BatchingSut::IssueQuery(const std::vector<mlperf::QuerySample>& samples) { batcher_->Enqueue(samples); }

}  // namespace harness
