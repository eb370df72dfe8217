// The client's configuration helpers (policy above the driver): byte sizes
// as OPENMTIA_* variables give them, and as CUDA's allocator prints them.
#include <gtest/gtest.h>

#include "openmtia/runtime.h"

TEST(Config, ParseByteSize) {
  EXPECT_EQ(omr::parseByteSize("1024"), 1024u);
  EXPECT_EQ(omr::parseByteSize("512M"), 512ull << 20);
  EXPECT_EQ(omr::parseByteSize("4G"), 4ull << 30);
  EXPECT_EQ(omr::parseByteSize("4GiB"), 4ull << 30);
  EXPECT_EQ(omr::parseByteSize("1.5k"), 1536u);
  EXPECT_THROW(omr::parseByteSize("lots"), omr::Error);
  EXPECT_THROW(omr::parseByteSize("4X"), omr::Error);
}

TEST(Config, FormatsSizesAsCudasAllocatorDoes) {
  EXPECT_EQ(omr::formatBytes(512), "512 bytes");
  EXPECT_EQ(omr::formatBytes(1024), "1024 bytes");
  EXPECT_EQ(omr::formatBytes(164864), "161.00 KiB");
  EXPECT_EQ(omr::formatBytes(1 << 20), "1024.00 KiB");
  EXPECT_EQ(omr::formatBytes(2255872), "2.15 MiB");
  EXPECT_EQ(omr::formatBytes(size_t(12) << 30), "12.00 GiB");
}
