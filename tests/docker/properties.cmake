# Included by ctest after the discovered test cases: the container image test runs the image the
# docker_image fixture built (tests/CMakeLists.txt) against the Kafka broker of the kafka_broker
# fixture, and not beside a Kafka test (both chains' broker locks).
# catch_discover_tests' prefix arrives as "docker:" (its trailing space is lost); ctest has no
# if(TEST) to try both spellings, so keep this name in step with the TEST_CASE in image_test.cc.
set_tests_properties("docker:the container image runs the Kafka drift monitor and stops cleanly on SIGTERM"
                     PROPERTIES FIXTURES_REQUIRED "kafka_broker;docker_image"
                     RESOURCE_LOCK "kafka_broker;kafka_broker_scale_out" TIMEOUT 900
                     ENVIRONMENT DRIFTD_IMAGE_REUSE=1
                     LABELS "e2e;kafka;docker")
