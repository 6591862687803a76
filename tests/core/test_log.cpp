#include <gtest/gtest.h>

#include "antdt/error.hpp"
#include "core/log.hpp"

using namespace antdt::log;

TEST(Log, ParsesLevels) {
  EXPECT_EQ(parse_level("ERROR"), Level::error);
  EXPECT_EQ(parse_level("warn"), Level::warn);
  EXPECT_EQ(parse_level("3"), Level::debug);
  EXPECT_THROW((void)parse_level("loud"), antdt::UsageError);
}

TEST(Log, LevelGatesOutput) {
  const Level saved = level();
  set_level(Level::warn);
  EXPECT_TRUE(enabled(Level::error));
  EXPECT_FALSE(enabled(Level::info));
  testing::internal::CaptureStderr();
  set_rank(3, 4);
  ANTDT_LOG(info) << "hidden";
  ANTDT_LOG(warn) << "shown " << 42;
  const std::string out = testing::internal::GetCapturedStderr();
  set_level(saved);
  EXPECT_EQ(out.find("hidden"), std::string::npos);
  EXPECT_NE(out.find("r3/4 warn] shown 42"), std::string::npos) << out;
}
