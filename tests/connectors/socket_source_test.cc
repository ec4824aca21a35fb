#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "connectors/connector_factories.h"
#include "connectors/fs_util.h"
#include "tests/connectors/connector_test_util.h"

namespace driftd {
namespace {

using testing::ReadRange;
using testing::SourcePipeline;
using testing::Texts;

// A TCP server on 127.0.0.1 with an OS-chosen port, playing `nc -lk`.
class LocalServer {
 public:
  LocalServer() {
    listener_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(listener_.valid());
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    REQUIRE(::listen(listener_.get(), 4) == 0);
    socklen_t size = sizeof(address);
    REQUIRE(::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&address), &size) == 0);
    port_ = ntohs(address.sin_port);
  }

  int port() const { return port_; }

  void Accept() {
    client_ = UniqueFd(::accept(listener_.get(), nullptr, nullptr));
    REQUIRE(client_.valid());
  }

  void Send(std::string_view text) {
    REQUIRE(::send(client_.get(), text.data(), text.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(text.size()));
  }

  void CloseClient() { client_ = UniqueFd(); }

 private:
  UniqueFd listener_;
  UniqueFd client_;
  int port_ = 0;
};

std::unique_ptr<Source> StartedSocket(int port, const SourceOffsets& committed = {},
                                      const std::string& max_buffered_bytes = "67108864") {
  auto source =
      CreateSocketSource(SourcePipeline("socket", {{"host", "127.0.0.1"},
                                                   {"port", std::to_string(port)},
                                                   {"maxBufferedBytes", max_buffered_bytes}}));
  REQUIRE(source);
  REQUIRE((*source)->Start(committed));
  return std::move(*source);
}

// Plans until the source has received `lines` lines in total, or five seconds pass.
SourceOffsets AwaitLines(Source& source, const SourceOffsets& start, int64_t lines) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (true) {
    auto end = source.PlanBatch(start);
    REQUIRE(end);
    if (end->at("socket") >= lines || std::chrono::steady_clock::now() > deadline) return *end;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

TEST_CASE("the socket source reads the lines a local TCP server sends", "[socket][source]") {
  LocalServer server;
  auto source = StartedSocket(server.port());
  server.Accept();
  CHECK_FALSE(source->IsReplayable());
  CHECK(source->IsReady());
  SourceOffsets start = *source->InitialOffsets();
  CHECK(start == SourceOffsets{{"socket", 0}});
  CHECK(*source->PlanBatch(start) == start);

  server.Send("{\"n\":1}\n{\"n\":2}\r\n\n{\"n\":");
  SourceOffsets first = AwaitLines(*source, start, 2);
  CHECK(first.at("socket") == 2);
  auto records = ReadRange(*source, start, first);
  CHECK(Texts(records) == std::vector<std::string>{"{\"n\":1}", "{\"n\":2}"});
  CHECK(records[1].position.offset == 1);
  source->OnCheckpointed(first);

  server.Send("3}\n");
  SourceOffsets second = AwaitLines(*source, first, 3);
  CHECK(second.at("socket") == 3);
  CHECK(Texts(ReadRange(*source, first, second)) == std::vector<std::string>{"{\"n\":3}"});
  auto lag = source->Lag(first);
  REQUIRE(lag.size() == 1);
  CHECK(lag[0].lag() == 1);
}

TEST_CASE("a line the server ends by closing the connection still arrives", "[socket][source]") {
  LocalServer server;
  auto source = StartedSocket(server.port());
  server.Accept();
  server.Send("{\"last\":true}");
  server.CloseClient();
  SourceOffsets end = AwaitLines(*source, {{"socket", 0}}, 1);
  CHECK(Texts(ReadRange(*source, {{"socket", 0}}, end)) ==
        std::vector<std::string>{"{\"last\":true}"});
}

TEST_CASE("after a restart the socket source numbers lines on without replaying",
          "[socket][source]") {
  LocalServer server;
  auto source = StartedSocket(server.port(), {{"socket", 10}});
  server.Accept();
  SourceOffsets start = *source->InitialOffsets();
  CHECK(start == SourceOffsets{{"socket", 10}});
  server.Send("{\"n\":11}\n");
  SourceOffsets end = AwaitLines(*source, start, 11);
  auto records = ReadRange(*source, start, end);
  REQUIRE(records.size() == 1);
  CHECK(records[0].position.offset == 10);
  CHECK(source->DescribePosition(records[0].position) ==
        "socket 127.0.0.1:" + std::to_string(server.port()) + " line 10");
}

TEST_CASE("blank lines do not fill the socket buffer", "[socket][source]") {
  LocalServer server;
  auto source = StartedSocket(server.port(), {}, "1024");
  server.Accept();
  for (int i = 0; i < 20; ++i) server.Send(std::string(500, '\n'));
  server.Send("{\"n\":1}\n");
  SourceOffsets end = AwaitLines(*source, {{"socket", 0}}, 1);
  CHECK(Texts(ReadRange(*source, {{"socket", 0}}, end)) == std::vector<std::string>{"{\"n\":1}"});
}

TEST_CASE("the socket source fails to start when nothing listens", "[socket][source]") {
  int port = 0;
  {
    LocalServer closed;
    port = closed.port();
  }
  auto source = CreateSocketSource(
      SourcePipeline("socket", {{"host", "127.0.0.1"}, {"port", std::to_string(port)}}));
  REQUIRE(source);
  auto started = (*source)->Start({});
  REQUIRE_FALSE(started);
  CHECK(started.error().code() == ErrorCode::kIo);
  CHECK_THAT(started.error().message(), Catch::Contains(std::to_string(port)));

  auto no_port = CreateSocketSource(SourcePipeline("socket", {}));
  REQUIRE_FALSE(no_port);
}

}  // namespace
}  // namespace driftd
