// OPENMTIA_FAULTS: parsing a fault list (runtime.h, parseFaults).
#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "openmtia/runtime.h"

namespace omr {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

[[noreturn]] void bad(const std::string& fault, const std::string& why) {
  throw Error(ErrorCode::kInvalidValue, "fault '" + fault + "': " + why);
}

uint64_t count(const std::string& fault, const std::string& key, const std::string& v) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
    bad(fault, key + "=" + v + " is not a count");
  errno = 0;
  const unsigned long long n = std::strtoull(v.c_str(), nullptr, 10);
  if (errno) bad(fault, key + "=" + v + " is too large");
  return n;
}

}  // namespace

std::vector<Fault> parseFaults(const std::string& spec, int rank, int restart) {
  std::vector<Fault> faults;
  for (const std::string& text : split(spec, ';')) {
    if (text.empty()) continue;
    const size_t colon = text.find(':');
    const std::string kind = text.substr(0, colon);
    Fault f;
    if (kind == "oom") f.kind = FaultKind::kDeviceOutOfMemory;
    else if (kind == "pinned_oom") f.kind = FaultKind::kPinnedOutOfMemory;
    else if (kind == "kernel") f.kind = FaultKind::kKernel;
    else if (kind == "lost") f.kind = FaultKind::kDeviceLost;
    else if (kind == "hang") f.kind = FaultKind::kHang;
    else if (kind == "corrupt") f.kind = FaultKind::kCorrupt;
    else bad(text, "unknown fault kind '" + kind + "' (oom, pinned_oom, kernel, lost, hang, corrupt)");
    const bool work = f.kind == FaultKind::kKernel || f.kind == FaultKind::kDeviceLost || f.kind == FaultKind::kHang ||
                      f.kind == FaultKind::kCorrupt;
    bool mine = true;
    if (colon != std::string::npos) {
      for (const std::string& setting : split(text.substr(colon + 1), ',')) {
        const size_t eq = setting.find('=');
        if (eq == std::string::npos) bad(text, "'" + setting + "' is not key=value");
        const std::string key = setting.substr(0, eq), v = setting.substr(eq + 1);
        if (key == "device") f.device = static_cast<int>(count(text, key, v));
        else if (key == "stream" && work) f.stream = static_cast<StreamId>(count(text, key, v));
        else if (key == "op" && work && !v.empty()) f.name = v;
        else if (key == "sticky" && f.kind == FaultKind::kKernel) {
          if (v != "0" && v != "1") bad(text, "sticky=" + v + " is not 0 or 1");
          f.sticky = v == "1";
        }
        else if (key == "after") f.after = count(text, key, v);
        else if (key == "times") f.times = count(text, key, v);
        else if (key == "seed") f.seed = count(text, key, v);
        else if (key == "rank") mine = mine && count(text, key, v) == static_cast<uint64_t>(rank);
        else if (key == "restart") mine = mine && count(text, key, v) == static_cast<uint64_t>(restart);
        else if (key == "rate") {
          char* end = nullptr;
          f.rate = std::strtod(v.c_str(), &end);
          if (v.empty() || *end || !(f.rate > 0 && f.rate <= 1)) bad(text, "rate=" + v + " is not a probability in (0, 1]");
        } else {
          bad(text, "unknown setting '" + key + "'" +
                        (f.kind == FaultKind::kKernel ? " (device, stream, op, sticky, after, times, rate, seed, rank, restart)"
                         : work                         ? " (device, stream, op, after, times, rate, seed, rank, restart)"
                                                        : " (device, after, times, rate, seed, rank, restart)"));
        }
      }
    }
    if (f.after == 0) bad(text, "after counts from 1 (the next event)");
    if (f.kind == FaultKind::kPinnedOutOfMemory && f.device >= 0) bad(text, "pinned memory belongs to no device");
    if (mine) faults.push_back(f);
  }
  return faults;
}

}  // namespace omr
