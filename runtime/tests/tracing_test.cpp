// The client's tracing (omr::setTracing): each task's record reaches the
// sink with the tag its launch got, the submit hook spans each submission,
// and the host's bookkeeping (kTaskUntraced) is neither tagged, submitted
// nor recorded.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "openmtia/runtime.h"

namespace {
std::mutex g_mu;
std::vector<std::pair<std::string, uint64_t>> g_records;
std::vector<int> g_submits;
uint64_t g_next = 0;

uint64_t tag() { return ++g_next; }
void sink(const omr::TaskRecord& r) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_records.emplace_back(r.name, r.tag);
}
void submitted(int begin) { g_submits.push_back(begin); }
}  // namespace

TEST(Tracing, BookkeepingTasksRunInOrderButAreNeitherTaggedNorRecorded) {
  const omr::StreamId s = omr::streamFromPool(0, 0);
  omr::streamSynchronize(0, s);
  std::vector<int> ran;
  omr::setTracing(&tag, &sink, &submitted);
  omr::launch(0, s, "work", [&ran] { ran.push_back(1); });
  omr::launch(0, s, "keep_alive", [&ran] { ran.push_back(2); }, omr::kTaskUntraced);
  omr::launch(0, s, "more_work", [&ran] { ran.push_back(3); });
  omr::streamSynchronize(0, s);
  omr::setTracing(nullptr, nullptr, nullptr);
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3}));
  std::lock_guard<std::mutex> lk(g_mu);
  EXPECT_EQ(g_records, (std::vector<std::pair<std::string, uint64_t>>{{"work", 1}, {"more_work", 2}}));
  EXPECT_EQ(g_submits, (std::vector<int>{1, 0, 1, 0}));
}
