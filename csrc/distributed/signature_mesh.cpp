#include "distributed/signature_mesh.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace openmtia::dist {

SignatureMesh::SignatureMesh(std::vector<int> fds, int rank) : fds_(std::move(fds)), rank_(rank) {}

SignatureMesh::~SignatureMesh() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

void SignatureMesh::fail(const std::string& why) {
  broken_ = why;
  throw std::runtime_error(why);
}

void SignatureMesh::exchange(const int64_t* mine, int64_t* all, size_t n, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!broken_.empty()) throw std::runtime_error(broken_ + " (at an earlier collective)");
  const size_t bytes = n * sizeof(int64_t);
  std::memcpy(all + rank_ * n, mine, bytes);
  for (size_t r = 0; r < fds_.size(); ++r) {  // (a message is far smaller than a socket's buffer: no peer blocks)
    if (fds_[r] < 0) continue;
    const char* p = reinterpret_cast<const char*>(mine);
    for (size_t sent = 0; sent < bytes;) {
      ssize_t k = ::send(fds_[r], p + sent, bytes - sent, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0)
        fail("openmtia: the connection to rank " + std::to_string(r) + " failed (" + std::strerror(errno) +
             "): that rank has likely exited");
      sent += static_cast<size_t>(k);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (size_t r = 0; r < fds_.size(); ++r) {
    if (fds_[r] < 0) continue;
    char* p = reinterpret_cast<char*>(all + r * n);
    for (size_t got = 0; got < bytes;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        fail("openmtia: rank " + std::to_string(r) + " did not call the collective within the group's timeout (" +
             std::to_string(timeout.count()) + " ms)");
      pollfd pfd{fds_[r], POLLIN, 0};
      int ready = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
      if (ready < 0 && errno != EINTR)
        fail(std::string("openmtia: waiting for a peer's signature failed (") + std::strerror(errno) + ")");
      if (ready <= 0) continue;  // (the deadline check above)
      ssize_t k = ::recv(fds_[r], p + got, bytes - got, 0);
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (k == 0) fail("openmtia: rank " + std::to_string(r) + " closed its connection: that rank has likely exited");
      if (k < 0)
        fail("openmtia: the connection to rank " + std::to_string(r) + " failed (" + std::strerror(errno) + ")");
      got += static_cast<size_t>(k);
    }
  }
}

}  // namespace openmtia::dist
