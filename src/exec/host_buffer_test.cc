// HostBuffer: every buffer starts on a cache line (streaming stores of
// line-long runs write whole lines only where the lines start where the
// runs do), large ones on a 2 MiB page.
#include "reshard/host_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>

namespace reshard {
namespace {

TEST(HostBuffer, BuffersStartOnALineLargeOnesOnAHugePage) {
  for (const int64_t bytes : {int64_t{1}, int64_t{17}, int64_t{100}, int64_t{4096}, int64_t{(1 << 20) + 17},
                              int64_t{(2 << 20) - 1}, int64_t{2} << 20, int64_t{(3 << 20) + 5}}) {
    HostBuffer b(bytes);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(b.size(), bytes);
    const auto at = reinterpret_cast<uintptr_t>(b.data());
    EXPECT_EQ(at % 64, 0u) << bytes << " bytes";
    if (bytes >= (int64_t{2} << 20)) {
      EXPECT_EQ(at % (uintptr_t{2} << 20), 0u) << bytes << " bytes";
    }
    std::memset(b.data(), 0x5a, static_cast<size_t>(bytes));  // every byte is the buffer's (ASan checks)
  }
}

TEST(HostBuffer, EmptyAndMoved) {
  HostBuffer empty(0);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0);
  HostBuffer a(100);
  std::byte* data = a.data();
  HostBuffer b(std::move(a));
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.size(), 100);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.size(), 0);
}

}  // namespace
}  // namespace reshard
