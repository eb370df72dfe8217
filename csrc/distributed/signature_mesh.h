// The sockets that carry the signatures of a group's collectives: one TCP
// connection to every other rank, made at the group's creation
// (openmtia/distributed.py connects them through the group's store). Before
// a collective's data moves, its task sends the call's signature to every
// peer and reads theirs, on the communication stream's worker itself: one
// message each way, no hop to another thread (a Gloo allgather of the
// signatures cost about as much as the collective on a busy host).
// Collectives are issued in the same order on every rank and run in that
// order on one stream, so each exchange pairs with the peers' same call.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace openmtia::dist {

class SignatureMesh {
 public:
  // `fds[r]`: the connected socket to rank r (-1 for this rank); owned from here on.
  SignatureMesh(std::vector<int> fds, int rank);
  ~SignatureMesh();
  SignatureMesh(const SignatureMesh&) = delete;
  SignatureMesh& operator=(const SignatureMesh&) = delete;

  // Sends `mine` (`n` values) to every peer and fills `all` (size x n, by
  // rank) with theirs. Throws std::runtime_error when a peer closed its
  // connection, a socket fails, or a peer's message does not come within
  // `timeout`; the mesh is unusable afterwards (every later exchange throws).
  void exchange(const int64_t* mine, int64_t* all, size_t n, std::chrono::milliseconds timeout);

 private:
  void fail(const std::string& why);
  std::vector<int> fds_;
  int rank_;
  std::mutex mu_;
  std::string broken_;  // why the mesh broke, if it did
};

}  // namespace openmtia::dist
