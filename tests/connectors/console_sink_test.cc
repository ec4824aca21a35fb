#include "connectors/console_sink.h"

#include <cstdio>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "connectors/connector_factories.h"
#include "tests/connectors/connector_test_util.h"

namespace driftd {
namespace {

OutputRows StatsRows() {
  OutputRows rows;
  rows.columns = {"model_id", "count", "mean(prediction)"};
  rows.Add("model-1", R"j({"model_id":"model-1","count":42,"mean(prediction)":0.5})j");
  rows.Add("",
           R"j({"model_id":"a-very-long-model-name-indeed","count":7,"mean(prediction)":1.0})j");
  rows.Add("model-3", R"({"model_id":"model-3","count":null})");
  return rows;
}

TEST_CASE("the console sink prints a batch as a Spark-like table", "[console][sink]") {
  CHECK(FormatConsoleBatch(7, StatsRows(), ConsoleFormatOptions{}) ==
        "-------------------------------------------\n"
        "Batch: 7\n"
        "-------------------------------------------\n"
        "+--------------------+-----+----------------+\n"
        "|            model_id|count|mean(prediction)|\n"
        "+--------------------+-----+----------------+\n"
        "|             model-1|   42|             0.5|\n"
        "|a-very-long-model...|    7|             1.0|\n"
        "|             model-3| null|            null|\n"
        "+--------------------+-----+----------------+\n"
        "\n");
}

TEST_CASE("without truncate the console shows whole cells left-aligned", "[console][sink]") {
  ConsoleFormatOptions options;
  options.truncate = false;
  CHECK(FormatConsoleBatch(0, StatsRows(), options) ==
        "-------------------------------------------\n"
        "Batch: 0\n"
        "-------------------------------------------\n"
        "+-----------------------------+-----+----------------+\n"
        "|model_id                     |count|mean(prediction)|\n"
        "+-----------------------------+-----+----------------+\n"
        "|model-1                      |42   |0.5             |\n"
        "|a-very-long-model-name-indeed|7    |1.0             |\n"
        "|model-3                      |null |null            |\n"
        "+-----------------------------+-----+----------------+\n"
        "\n");
}

TEST_CASE("numRows limits the rows shown and says so", "[console][sink]") {
  ConsoleFormatOptions options;
  options.num_rows = 1;
  CHECK(FormatConsoleBatch(3, StatsRows(), options) ==
        "-------------------------------------------\n"
        "Batch: 3\n"
        "-------------------------------------------\n"
        "+--------+-----+----------------+\n"
        "|model_id|count|mean(prediction)|\n"
        "+--------+-----+----------------+\n"
        "| model-1|   42|             0.5|\n"
        "+--------+-----+----------------+\n"
        "only showing top 1 row\n"
        "\n");
}

TEST_CASE("an empty batch prints its header, and columns default to the first row's keys",
          "[console][sink]") {
  OutputRows empty;
  empty.columns = {"model_id", "n"};
  CHECK(FormatConsoleBatch(1, empty, {}) ==
        "-------------------------------------------\n"
        "Batch: 1\n"
        "-------------------------------------------\n"
        "+--------+---+\n"
        "|model_id|  n|\n"
        "+--------+---+\n"
        "+--------+---+\n"
        "\n");

  OutputRows nested;
  nested.Add("", R"({"id":"é","v":[1.5,2,null],"o":{"a":1,"b":"x"},"ok":true})");
  CHECK(FormatConsoleBatch(2, nested, {}) ==
        "-------------------------------------------\n"
        "Batch: 2\n"
        "-------------------------------------------\n"
        "+---+--------------+------+----+\n"
        "| id|             v|     o|  ok|\n"
        "+---+--------------+------+----+\n"
        "|  é|[1.5, 2, null]|{1, x}|true|\n"
        "+---+--------------+------+----+\n"
        "\n");
}

TEST_CASE("the console sink prints its own stream and counts every batch as delivered",
          "[console][sink]") {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out{std::tmpfile(), &std::fclose};
  REQUIRE(out);
  SinkSpec spec;
  spec.name = "alerts-console";
  spec.format = "console";
  spec.stream = StreamKind::kAlerts;
  auto sink = NewConsoleSink(spec, {}, out.get());
  REQUIRE(sink->Open());
  BatchOutput output;
  output.batch_id = 5;
  output.stats_append = StatsRows();
  output.alerts.columns = {"alert_id"};
  output.alerts.Add("model-1", R"({"alert_id":"a1"})");
  REQUIRE(sink->Deliver(output));

  std::rewind(out.get());
  std::string printed(4096, '\0');
  printed.resize(std::fread(printed.data(), 1, printed.size(), out.get()));
  CHECK(printed == FormatConsoleBatch(5, output.alerts, {}));
  CHECK_THAT(printed, Catch::Contains("|      a1|"));
  // Recovery must not reprint: the console claims every batch.
  auto delivered = sink->IsDelivered(4);
  REQUIRE(delivered);
  CHECK(*delivered);
}

TEST_CASE("console options come from the sink spec", "[console][sink]") {
  PipelineSpec pipeline;
  SinkSpec spec;
  spec.name = "console-0";
  spec.format = "console";
  spec.options = testing::WithDefaults("console", ConnectorRole::kSink, {{"numRows", "-1"}});
  auto sink = CreateConsoleSink(pipeline, spec);
  REQUIRE_FALSE(sink);
  CHECK(sink.error().code() == ErrorCode::kConfig);
}

}  // namespace
}  // namespace driftd
