#!/bin/bash
# As Kafka's bin/kafka-broker-api-versions.sh: the tools' broker API versions command, which the
# compose file's healthcheck runs.
exec java -cp '/opt/kafka/libs/*' -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties \
  org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
