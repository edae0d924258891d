// The wire between the core, in the LoadGen process, and a worker process that runs one device's backend.
//
// One connected stream socket (a socketpair made by the LoadGen process) carries framed messages both ways: a
// 24-byte header (type, count, payload bytes) and then the payload. Batches travel as QSL indices and responses as
// one size per sample followed by the bytes, so nothing per sample is Python in the LoadGen process. The Python
// end, and the messages exchanged before and after the test (ready, end, stats), are in code/harness/workers.py;
// the bindings export the numbers below, and a test checks the Python end's against them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace harness {

enum class Message : std::uint32_t {
  kBatch = 1,      // core -> worker: count samples; payload int64 QSL indices
  kResponses = 2,  // worker -> core: count samples; payload uint64 sizes, then each sample's bytes in turn
  kError = 3,      // worker -> core: payload the error's text (its traceback); the worker runs nothing more
  kTake = 4,       // worker -> core: count = most samples wanted; payload double seconds to wait for the first
  kTaken = 5,      // core -> worker: count samples; payload uint64 response ids, then int64 QSL indices
  kClosed = 6,     // core -> worker: the test is over; the engine finishes what it holds and returns
  kComplete = 7,   // worker -> core: count samples; payload uint64 response ids, uint64 sizes, then the bytes
  kDone = 8,       // worker -> core: the engine's run_continuous returned
  kReady = 9,      // worker -> LoadGen process, before the test: payload JSON (device, placement, load time)
  kEnd = 10,       // LoadGen process -> worker, after the test: stop serving
  kStats = 11,     // worker -> LoadGen process, after kEnd: payload JSON (engine counters, CPU time)
  kHello = 12,     // worker -> LoadGen process, first on a connection it opened (TCP): payload JSON (run, slot, device)
  kFirstTokens = 13,  // worker -> core: count samples; payload uint64 response ids, then int32 first token ids
};

struct MessageHeader {
  std::uint32_t type = 0;
  std::uint32_t reserved = 0;
  std::uint64_t count = 0;
  std::uint64_t payload_bytes = 0;
};
static_assert(sizeof(MessageHeader) == 24, "the header's layout is the Python end's struct '<IIQQ'");

// A message bigger than this is a broken peer, not a response (BERT's largest batch answers ~3 MB).
constexpr std::uint64_t kMaxPayloadBytes = std::uint64_t{1} << 30;

struct Piece {
  const void* data;
  std::size_t size;
};

// One end of a worker's socket. Not thread-safe: one thread uses a channel at a time.
class WorkerChannel {
 public:
  explicit WorkerChannel(int fd) : fd_(fd) {}

  // Sends the header and the payload pieces; false (and error() says why) when the worker is gone. Never raises
  // SIGPIPE.
  bool Send(Message type, std::uint64_t count, const std::vector<Piece>& payload);
  // Receives one whole message; false on end of file (the worker exited), an error or an oversized payload.
  bool Receive(MessageHeader* header, std::vector<std::uint8_t>* payload);

  const std::string& error() const { return error_; }

 private:
  int fd_;
  std::string error_;
};

}  // namespace harness
