// A batch's output in the outbox: the byte codec's layout, and the layout before it (a batch
// pending delivery at an upgrade is still delivered).
#include <string>

#include <catch2/catch.hpp>

#include "engine/executor/outbox_codec.h"

namespace driftd {
namespace {

BatchOutput Sample() {
  BatchOutput output;
  output.batch_id = 12;
  output.source_end = {{"logs-0", 100}, {"logs-1", 42}};
  output.stats_update.columns = {"model_id", "count"};
  output.stats_update.rows = {R"({"model_id":"m1","count":3})"};
  output.stats_update.keys = {"m1"};
  output.alerts.columns = {"alert_id"};
  output.alerts.rows = {R"({"alert_id":"a"})", R"({"alert_id":"b"})"};
  output.alerts.keys = {"m1", "m2"};
  output.performance.rows = {R"({"model_id":"m1"})"};
  output.performance.keys = {""};
  return output;
}

void CheckSample(const BatchOutput& output) {
  CHECK(output.batch_id == 12);
  CHECK(output.source_end == SourceOffsets{{"logs-0", 100}, {"logs-1", 42}});
  CHECK(output.stats_update.rows == std::vector<std::string>{R"({"model_id":"m1","count":3})"});
  CHECK(output.stats_update.keys == std::vector<std::string>{"m1"});
  CHECK(output.alerts.rows.size() == 2);
  CHECK(output.alerts.keys[1] == "m2");
  CHECK(output.performance.rows.size() == 1);
}

TEST_CASE("a batch's output reads back from the outbox's bytes", "[executor][codec]") {
  const std::string bytes = EncodeBatchOutput(Sample());
  CHECK(bytes[0] == 4);
  auto back = DecodeBatchOutput(bytes);
  REQUIRE(back);
  CheckSample(*back);
  for (size_t size = 0; size < bytes.size(); ++size) {
    INFO(size);
    CHECK_FALSE(DecodeBatchOutput(bytes.substr(0, size)));
  }
}

// Little-endian u32s, as builds before the codec copied them from memory on x86-64 and arm64.
void PutLe32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutLeString(std::string& out, std::string_view s) {
  PutLe32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}
void PutLeRows(std::string& out, const OutputRows& rows) {
  PutLe32(out, static_cast<uint32_t>(rows.columns.size()));
  for (const auto& column : rows.columns) PutLeString(out, column);
  PutLe32(out, static_cast<uint32_t>(rows.rows.size()));
  for (size_t i = 0; i < rows.rows.size(); ++i) {
    PutLeString(out, rows.keys[i]);
    PutLeString(out, rows.rows[i]);
  }
}

TEST_CASE("an outbox entry of the layout before the codec is still read", "[executor][codec]") {
  const BatchOutput sample = Sample();
  std::string bytes(1, '\3');  // format 3: every stream, the performance one last
  PutLeString(bytes, "12");
  PutLeString(bytes, R"({"logs-0":100,"logs-1":42})");
  for (const OutputRows* rows : {&sample.stats_append, &sample.stats_update,
                                 &sample.stats_complete, &sample.alerts, &sample.dead_letters,
                                 &sample.evaluations, &sample.performance}) {
    PutLeRows(bytes, *rows);
  }
  auto back = DecodeBatchOutput(bytes);
  REQUIRE(back);
  CheckSample(*back);
  bytes[1 + 4] = 'x';  // the batch id's text
  CHECK_FALSE(DecodeBatchOutput(bytes));
}

}  // namespace
}  // namespace driftd
