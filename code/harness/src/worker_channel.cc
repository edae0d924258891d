#include "worker_channel.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace harness {
namespace {

// Writes every byte of the pieces, resuming after partial writes and signals.
bool SendAll(int fd, std::vector<iovec> pieces, std::string* error) {
  std::size_t first = 0;
  while (first < pieces.size()) {
    msghdr message{};
    message.msg_iov = pieces.data() + first;
    message.msg_iovlen = pieces.size() - first;
    const ssize_t sent = sendmsg(fd, &message, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      *error = std::strerror(errno);
      return false;
    }
    auto left = static_cast<std::size_t>(sent);
    while (first < pieces.size() && left >= pieces[first].iov_len) {
      left -= pieces[first].iov_len;
      ++first;
    }
    if (first < pieces.size()) {
      pieces[first].iov_base = static_cast<char*>(pieces[first].iov_base) + left;
      pieces[first].iov_len -= left;
    }
  }
  return true;
}

// Reads exactly size bytes; false on end of file or an error.
bool ReceiveAll(int fd, void* data, std::size_t size, std::string* error) {
  auto* at = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t got = read(fd, at, size);
    if (got == 0) {
      *error = "the connection closed";
      return false;
    }
    if (got < 0) {
      if (errno == EINTR) continue;
      *error = std::strerror(errno);
      return false;
    }
    at += got;
    size -= static_cast<std::size_t>(got);
  }
  return true;
}

}  // namespace

bool WorkerChannel::Send(Message type, std::uint64_t count, const std::vector<Piece>& payload) {
  MessageHeader header;
  header.type = static_cast<std::uint32_t>(type);
  header.count = count;
  std::vector<iovec> pieces;
  pieces.reserve(payload.size() + 1);
  pieces.push_back({&header, sizeof(header)});
  for (const Piece& piece : payload) {
    if (piece.size == 0) continue;
    header.payload_bytes += piece.size;
    pieces.push_back({const_cast<void*>(piece.data), piece.size});
  }
  return SendAll(fd_, std::move(pieces), &error_);
}

bool WorkerChannel::Receive(MessageHeader* header, std::vector<std::uint8_t>* payload) {
  if (!ReceiveAll(fd_, header, sizeof(*header), &error_)) return false;
  if (header->payload_bytes > kMaxPayloadBytes) {
    error_ = "a message of " + std::to_string(header->payload_bytes) + " bytes (the peer is not a worker, or broke)";
    return false;
  }
  payload->resize(static_cast<std::size_t>(header->payload_bytes));
  return ReceiveAll(fd_, payload->data(), payload->size(), &error_);
}

}  // namespace harness
