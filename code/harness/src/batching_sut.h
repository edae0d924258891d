// LoadGen's view of the system: IssueQuery hands the samples to the Batcher and returns at once.
//
// IssueQuery runs on LoadGen's issue thread; it must neither block on inference nor touch Python (no GIL), or it
// would delay the issue of the next query and distort Server/SingleStream timing.
#pragma once

#include <system_under_test.h>

#include <string>
#include <vector>

#include "batcher.h"

namespace harness {

class BatchingSut : public mlperf::SystemUnderTest {
 public:
  explicit BatchingSut(Batcher* batcher) : batcher_(batcher) {}

  const std::string& Name() override { return name_; }
  void IssueQuery(const std::vector<mlperf::QuerySample>& samples) override;
  // Nothing to flush: workers never hold samples back beyond batch_timeout.
  void FlushQueries() override {}

 private:
  const std::string name_ = "HarnessSUT";
  Batcher* batcher_;
};

}  // namespace harness
