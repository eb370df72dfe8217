// What the engine and the framework's client of a driver share: error
// types and byte sizes (openmtia/runtime.h).
#include "openmtia/runtime.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace omr {

// As CUDA's allocator prints sizes: "512 bytes", "161.00 KiB", "2.15 MiB", "12.00 GiB".
std::string formatBytes(size_t b) {
  char buf[64];
  if (b <= 1024) std::snprintf(buf, sizeof buf, "%zu bytes", b);
  else if (b <= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024.0);
  else if (b <= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1ull << 20));
  else std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  return buf;
}

OutOfMemoryError::OutOfMemoryError(int dev, size_t req, size_t used_, size_t cap, std::string message)
    : Error(ErrorCode::kOutOfMemory, std::move(message)), device(dev), requested(req), used(used_), capacity(cap) {}

OutOfMemoryError::OutOfMemoryError(int dev, size_t req, size_t used_, size_t cap)
    : Error(ErrorCode::kOutOfMemory,
            "mtia:" + std::to_string(dev) + " out of memory: tried to allocate " +
                formatBytes(req) + "; " + formatBytes(used_) + " already allocated, " +
                formatBytes(cap - used_) + " free of " + formatBytes(cap) + " total capacity"),
      device(dev), requested(req), used(used_), capacity(cap) {}

size_t parseByteSize(const std::string& text) {
  const char* s = text.c_str();
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || !(v >= 0) || std::isinf(v)) throw Error(ErrorCode::kInvalidValue, "bad byte size '" + text + "'");
  std::string unit(end);
  std::string u;
  for (char c : unit) if (c != ' ') u += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (u.size() >= 2 && u.substr(u.size() - 2) == "IB") u.resize(u.size() - 2);
  else if (u.size() >= 2 && u.back() == 'B') u.pop_back();
  double mul;
  if (u.empty() || u == "B") mul = 1;
  else if (u == "K") mul = 1024.0;
  else if (u == "M") mul = 1024.0 * 1024;
  else if (u == "G") mul = 1024.0 * 1024 * 1024;
  else if (u == "T") mul = 1024.0 * 1024 * 1024 * 1024;
  else throw Error(ErrorCode::kInvalidValue, "bad byte size unit in '" + text + "'");
  return static_cast<size_t>(v * mul);
}

}  // namespace omr
