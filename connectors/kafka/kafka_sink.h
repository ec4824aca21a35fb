// What the `kafka` sink makes known outside connectors/kafka: the name of the progress topic a
// pipeline uses when its sinks name none (tools that create topics ahead, like the demo's
// embedded cluster, need it). No librdkafka type appears here.
#pragma once

#include <string>
#include <string_view>

namespace driftd {

/// The progress topic of pipeline `pipeline_name` when progressTopic is unset or empty:
/// "driftd-progress.<name>", the characters Kafka does not allow in topic names replaced by '_'
/// and a name too long for a topic cut and suffixed with a hash of the whole name.
std::string DefaultKafkaProgressTopic(std::string_view pipeline_name);

}  // namespace driftd
