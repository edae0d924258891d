#include "worker_runners.h"

#include <loadgen.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "timeline.h"

namespace harness {
namespace {

constexpr char kConnectionClosed[] = "the connection closed";  // WorkerChannel's error at end of file

// Why a conversation with a worker stopped: its end of the socket closed (it died), or the stream broke.
std::string Lost(const WorkerChannel& channel) {
  if (channel.error() == kConnectionClosed) {
    return "the worker process closed its connection (it ended: killed, out of memory, or a crash; the LoadGen "
           "process names its exit status once the test has ended)";
  }
  return "the connection to the worker process broke: " + channel.error();
}

std::string TextOf(const std::vector<std::uint8_t>& payload) {
  return std::string(reinterpret_cast<const char*>(payload.data()), payload.size());
}

std::string Unexpected(const MessageHeader& header, const char* expected) {
  return "the worker sent message " + std::to_string(header.type) + " where " + expected +
         " was due (a worker of another version of the harness?)";
}

// Reads `count` values of T from the payload at *offset; false when the payload is too short.
template <typename T>
bool ReadArray(const std::vector<std::uint8_t>& payload, std::size_t count, std::size_t* offset, std::vector<T>* out) {
  const std::size_t bytes = count * sizeof(T);
  if (payload.size() < *offset + bytes) return false;
  out->resize(count);
  std::memcpy(out->data(), payload.data() + *offset, bytes);
  *offset += bytes;
  return true;
}

// Responses for `ids` from a payload laid out as sizes then bytes starting at `offset`; the addresses point into
// the payload, which must outlive QuerySamplesComplete. False when the sizes do not add up to the payload.
bool ResponsesFrom(const std::vector<std::uint8_t>& payload, std::size_t offset,
                   const std::vector<mlperf::ResponseId>& ids, std::vector<mlperf::QuerySampleResponse>* out) {
  std::vector<std::uint64_t> sizes;
  if (!ReadArray(payload, ids.size(), &offset, &sizes)) return false;
  out->clear();
  out->reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (sizes[i] > payload.size() - offset) return false;
    const auto address = sizes[i] == 0 ? 0 : reinterpret_cast<std::uintptr_t>(payload.data() + offset);
    out->emplace_back(ids[i], address, static_cast<std::size_t>(sizes[i]));
    offset += static_cast<std::size_t>(sizes[i]);
  }
  return offset == payload.size();
}

}  // namespace

WorkerBatchRunner::WorkerBatchRunner(const std::vector<int>& fds, ErrorState* errors, std::size_t device,
                                     std::string where)
    : errors_(errors), device_(device), where_(std::move(where)) {
  for (const int fd : fds) {
    channels_.push_back(std::make_unique<WorkerChannel>(fd));
    free_.push_back(channels_.back().get());
  }
}

WorkerChannel* WorkerBatchRunner::Acquire() {
  std::unique_lock<std::mutex> lock(mutex_);
  free_cv_.wait(lock, [this] { return !free_.empty(); });
  WorkerChannel* channel = free_.back();
  free_.pop_back();
  return channel;
}

void WorkerBatchRunner::Release(WorkerChannel* channel) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(channel);
  }
  free_cv_.notify_one();
}

void WorkerBatchRunner::RunBatch(const std::vector<mlperf::QuerySample>& batch) {
  if (errors_->Failed()) {
    CompleteWithEmptyResponses(batch, device_);
    return;
  }
  WorkerChannel* channel = Acquire();
  std::vector<std::uint8_t> payload;
  const bool answered = Exchange(channel, batch, &payload);
  Release(channel);
  if (!answered) {
    CompleteWithEmptyResponses(batch, device_);
    return;
  }
  std::vector<mlperf::ResponseId> ids;
  ids.reserve(batch.size());
  for (const auto& sample : batch) ids.push_back(sample.id);
  std::vector<mlperf::QuerySampleResponse> responses;
  ResponsesFrom(payload, 0, ids, &responses);  // checked in Exchange
  CompleteSamples(responses.data(), responses.size(), device_);
}

bool WorkerBatchRunner::Exchange(WorkerChannel* channel, const std::vector<mlperf::QuerySample>& batch,
                                 std::vector<std::uint8_t>* payload) {
  std::vector<std::int64_t> indices;
  indices.reserve(batch.size());
  for (const auto& sample : batch) indices.push_back(static_cast<std::int64_t>(sample.index));
  MessageHeader header;
  if (!channel->Send(Message::kBatch, indices.size(), {{indices.data(), indices.size() * sizeof(std::int64_t)}}) ||
      !channel->Receive(&header, payload)) {
    errors_->RecordMessage(Lost(*channel), where_);
    return false;
  }
  if (header.type == static_cast<std::uint32_t>(Message::kError)) {
    errors_->RecordMessage(TextOf(*payload), where_);
    return false;
  }
  if (header.type != static_cast<std::uint32_t>(Message::kResponses)) {
    errors_->RecordMessage(Unexpected(header, "the responses to a batch"), where_);
    return false;
  }
  std::vector<mlperf::ResponseId> ids(batch.size());
  std::vector<mlperf::QuerySampleResponse> unused;
  if (header.count != batch.size() || !ResponsesFrom(*payload, 0, ids, &unused)) {
    errors_->RecordMessage("the worker answered a batch of " + std::to_string(batch.size()) + " samples with " +
                               std::to_string(header.count) + " responses in " + std::to_string(payload->size()) +
                               " bytes that do not add up",
                           where_);
    return false;
  }
  return true;
}

WorkerEngine::WorkerEngine(int fd, Batcher* batcher, ErrorState* errors, std::size_t device, std::string where)
    : channel_(fd), batcher_(batcher), errors_(errors), device_(device), where_(std::move(where)) {}

WorkerEngine::~WorkerEngine() { Join(); }

void WorkerEngine::Start() {
  thread_ = std::thread([this] { ThreadMain(); });
}

void WorkerEngine::Join() {
  if (thread_.joinable()) thread_.join();
}

void WorkerEngine::Fail(const std::string& message) { errors_->RecordMessage(message, where_); }

void WorkerEngine::ThreadMain() {
  MessageHeader header;
  std::vector<std::uint8_t> payload;
  for (;;) {
    if (!channel_.Receive(&header, &payload)) {
      Fail(Lost(channel_));
      break;
    }
    const auto type = static_cast<Message>(header.type);
    if (type == Message::kTake) {
      if (!AnswerTake(header, payload)) break;
    } else if (type == Message::kComplete) {
      if (!Complete(header, payload)) break;
    } else if (type == Message::kFirstTokens) {
      if (!FirstTokens(header, payload)) break;
    } else if (type == Message::kDone) {
      const std::string wrong = EngineEndProblem(closed_, in_flight_.Size());
      if (!wrong.empty()) Fail(wrong);
      break;
    } else if (type == Message::kError) {
      Fail(TextOf(payload));
      break;
    } else {
      Fail(Unexpected(header, "a take, a completion or the end of the engine"));
      break;
    }
  }
  // Whatever is taken and not completed, and whatever LoadGen issues until the test ends, gets an empty response.
  in_flight_.CompleteAllEmpty(device_);
  AnswerEmptyUntilStopped(batcher_, device_);
}

bool WorkerEngine::AnswerTake(const MessageHeader& header, const std::vector<std::uint8_t>& payload) {
  double timeout_s = 0.0;
  if (payload.size() != sizeof(timeout_s)) {
    Fail("a take request of " + std::to_string(payload.size()) + " bytes (8 expected)");
    return false;
  }
  std::memcpy(&timeout_s, payload.data(), sizeof(timeout_s));
  const std::string bad_timeout = TakeTimeoutProblem(timeout_s);
  if (!bad_timeout.empty()) {
    Fail(bad_timeout);
    return false;
  }
  std::vector<mlperf::QuerySample> taken;
  // Another device's failure ends the test for this one too: it finishes what it holds and returns.
  bool open = !errors_->Failed();
  if (open && (header.count > 0 || timeout_s > 0.0)) {
    const auto wait = std::chrono::microseconds(static_cast<std::int64_t>(timeout_s * 1e6));
    open = batcher_->Take(static_cast<std::size_t>(header.count), wait, &taken);
  }
  if (!open) {
    closed_ = true;
    if (!channel_.Send(Message::kClosed, 0, {})) {
      Fail(Lost(channel_));
      return false;
    }
    return true;
  }
  std::vector<std::uint64_t> ids;
  std::vector<std::int64_t> indices;
  ids.reserve(taken.size());
  indices.reserve(taken.size());
  for (const auto& sample : taken) {
    ids.push_back(sample.id);
    indices.push_back(static_cast<std::int64_t>(sample.index));
  }
  in_flight_.Add(taken);
  if (!channel_.Send(Message::kTaken, taken.size(),
                     {{ids.data(), ids.size() * sizeof(std::uint64_t)},
                      {indices.data(), indices.size() * sizeof(std::int64_t)}})) {
    Fail(Lost(channel_));
    return false;
  }
  return true;
}

bool WorkerEngine::Complete(const MessageHeader& header, const std::vector<std::uint8_t>& payload) {
  std::size_t offset = 0;
  std::vector<std::uint64_t> ids;
  std::vector<mlperf::QuerySampleResponse> responses;
  if (!ReadArray(payload, static_cast<std::size_t>(header.count), &offset, &ids) ||
      !ResponsesFrom(payload, offset, ids, &responses)) {
    Fail("session.complete: " + std::to_string(header.count) + " responses in " + std::to_string(payload.size()) +
         " bytes that do not add up");
    return false;
  }
  std::vector<bool> first_reported;
  const std::string wrong = in_flight_.Remove(ids.data(), ids.size(), &first_reported);
  if (!wrong.empty()) {
    Fail("session.complete: " + wrong);
    return false;
  }
  CompleteSamples(responses.data(), responses.size(), device_, &first_reported);
  return true;
}

bool WorkerEngine::FirstTokens(const MessageHeader& header, const std::vector<std::uint8_t>& payload) {
  const auto count = static_cast<std::size_t>(header.count);
  std::size_t offset = 0;
  std::vector<std::uint64_t> ids;
  std::vector<std::int32_t> tokens;
  if (!ReadArray(payload, count, &offset, &ids) || !ReadArray(payload, count, &offset, &tokens) ||
      offset != payload.size()) {
    Fail("session.first_tokens: " + std::to_string(count) + " first tokens in " + std::to_string(payload.size()) +
         " bytes (12 a sample expected)");
    return false;
  }
  const std::string wrong = in_flight_.MarkFirstTokens(ids.data(), count);
  if (!wrong.empty()) {
    Fail("session.first_tokens: " + wrong);
    return false;
  }
  ReportFirstTokens(ids.data(), tokens.data(), count);
  return true;
}

}  // namespace harness
