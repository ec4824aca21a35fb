// The checkpoint's records in the byte codec of engine/codec.h, and the older encodings that
// are still read.
#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/codec.h"
#include "state/checkpoint_codec.h"

namespace driftd {
namespace {

TEST_CASE("the codec's integers sort as bytes as they do as numbers", "[state][codec]") {
  const std::vector<int64_t> numbers = {INT64_MIN, -70000, -1, 0, 1, 255, 256, 70000, INT64_MAX};
  std::vector<std::string> keys;
  for (int64_t n : numbers) {
    std::string key;
    codec::Writer(key).OrderedI64(n);
    keys.push_back(key);
    codec::Reader reader(key);
    int64_t back = 0;
    REQUIRE(reader.OrderedI64(back));
    CHECK(back == n);
  }
  CHECK(std::is_sorted(keys.begin(), keys.end()));
  std::string big_endian;
  codec::Writer(big_endian).U32(0x01020304);
  CHECK(big_endian == std::string("\x01\x02\x03\x04", 4));
}

TEST_CASE("persisted numbers are parsed whole or refused, never thrown", "[state][codec]") {
  CHECK(codec::ParseDecimal("1795000000000") == 1795000000000);
  CHECK(codec::ParseDecimal("-2") == -2);
  CHECK_FALSE(codec::ParseDecimal(""));
  CHECK_FALSE(codec::ParseDecimal("1 "));
  CHECK_FALSE(codec::ParseDecimal("12abc"));
  CHECK_FALSE(codec::ParseDecimal("99999999999999999999"));
  CHECK_FALSE(codec::ParseDecimal<int>("4294967296"));
}

TEST_CASE("a commit record is written in the codec's layout and read back", "[state][codec]") {
  CommitRecord commit;
  commit.batch_id = 41;
  commit.watermark_us = -5;
  commit.committed_at_ms = 1795000000123;
  commit.start = {{"logs-0", 10}, {"logs-1", 7}};
  commit.end = {{"logs-0", 20}, {"logs-1", 9}};
  commit.max_event_us = {{"logs-0", 1795000000000000}};
  const std::string bytes = checkpoint_codec::EncodeCommitValue(commit);
  CHECK(bytes[0] == 3);
  CHECK(bytes.find("\"logs-0\":") == std::string::npos);  // no JSON inside
  auto back = checkpoint_codec::DecodeCommitValue(bytes);
  REQUIRE(back);
  CHECK(back->batch_id == 41);
  CHECK(back->watermark_us == -5);
  CHECK(back->committed_at_ms == 1795000000123);
  CHECK(back->start == commit.start);
  CHECK(back->end == commit.end);
  CHECK(back->max_event_us == commit.max_event_us);
  // Truncated anywhere: refused, never read past its end.
  for (size_t size = 0; size < bytes.size(); ++size) {
    INFO(size);
    CHECK_FALSE(checkpoint_codec::DecodeCommitValue(bytes.substr(0, size)));
  }
}

// A commit record as builds before the codec wrote it: version 2, big-endian integers and the
// offsets as u32-length-prefixed JSON.
std::string Version2Commit() {
  std::string out;
  codec::Writer writer(out);
  writer.U8(2);
  writer.I64(7);
  writer.I64(INT64_MIN);
  writer.I64(1795000000000);
  writer.String(R"({"rate-0":1000,"startTimeMs":1795000000000})");
  writer.String(R"({"rate-0":2000,"startTimeMs":1795000000000})");
  writer.String(R"({"":1795000000500000})");
  return out;
}

TEST_CASE("commit records of the layout before the codec are still read", "[state][codec]") {
  auto commit = checkpoint_codec::DecodeCommitValue(Version2Commit());
  REQUIRE(commit);
  CHECK(commit->batch_id == 7);
  CHECK(commit->watermark_us == INT64_MIN);
  CHECK(commit->end.at("rate-0") == 2000);
  CHECK(commit->max_event_us.at("") == 1795000000500000);
  std::string unknown = Version2Commit();
  unknown[0] = 9;
  auto refused = checkpoint_codec::DecodeCommitValue(unknown);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == ErrorCode::kIncompatible);
}

}  // namespace
}  // namespace driftd
