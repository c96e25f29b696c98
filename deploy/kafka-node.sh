#!/usr/bin/env bash
# One node of the compose file's Kafka (KRaft: broker and controller in one process), run by the
# `kafka` service (and `kafka-2`, `kafka-3` of docker-compose.ha.yml) from the Apache Kafka image:
#
#   bash kafka-node.sh            writes server.properties, formats the data volume the first time
#                                 (with every SCRAM user), starts the node
#   bash kafka-node.sh --print    writes the properties to standard output and nothing else:
#                                 scripts/check_compose.py reads them back and holds them to
#                                 Kafka's start-up rules (no Kafka needed)
#
# Everything comes from the environment the compose file gives the container:
#   KAFKA_NODE_ID, KAFKA_HOST             this node's id and its name on the compose network
#   KAFKA_PROCESS_ROLES                   broker,controller (the default) or broker
#   KAFKA_CONTROLLER_QUORUM_VOTERS        id@host:9093 of every controller (1@kafka:9093 alone)
#   KAFKA_REPLICATION_FACTOR              of the internal topics (1 alone, 3 in the ha file)
#   KAFKA_MIN_INSYNC_REPLICAS             what an acks=all write waits for (1 alone, 2 in ha)
#   ADVERTISED_HOST_PORT                  the host port of this node's external listener
#   KAFKA_ADMIN_PASSWORD, KAFKA_CONTROLLER_PASSWORD, KAFKA_PASSWORD_<USER>, CLUSTER_ID
set -euo pipefail

: "${KAFKA_NODE_ID:?}" "${KAFKA_HOST:?}" "${KAFKA_CONTROLLER_QUORUM_VOTERS:?}"
# broker,controller (every node of the compose files); broker for a node added later, whose id is
# not among the voters.
KAFKA_PROCESS_ROLES=${KAFKA_PROCESS_ROLES:-broker,controller}
: "${KAFKA_REPLICATION_FACTOR:?}" "${KAFKA_MIN_INSYNC_REPLICAS:?}" "${ADVERTISED_HOST_PORT:?}"
: "${KAFKA_ADMIN_PASSWORD:?}" "${KAFKA_CONTROLLER_PASSWORD:?}"

scram=org.apache.kafka.common.security.scram.ScramLoginModule
plain=org.apache.kafka.common.security.plain.PlainLoginModule

properties() {
  cat <<PROPERTIES
node.id=$KAFKA_NODE_ID
process.roles=$KAFKA_PROCESS_ROLES
controller.quorum.voters=$KAFKA_CONTROLLER_QUORUM_VOTERS
controller.listener.names=CONTROLLER
# INTERNAL for the services on the compose network, EXTERNAL for tools on the host (islet CLI),
# CONTROLLER for the nodes alone (not published). Every one of them authenticates its clients.
listeners=INTERNAL://:9092,CONTROLLER://:9093,EXTERNAL://:9094
advertised.listeners=INTERNAL://$KAFKA_HOST:9092,EXTERNAL://localhost:$ADVERTISED_HOST_PORT
listener.security.protocol.map=INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT,EXTERNAL:SASL_PLAINTEXT
inter.broker.listener.name=INTERNAL
# SCRAM for clients and between brokers: a JAAS entry per listener that offers it (the internal
# one's names the user this node connects to other brokers as).
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.internal.scram-sha-512.sasl.jaas.config=$scram required username="admin" password="$KAFKA_ADMIN_PASSWORD";
listener.name.external.scram-sha-512.sasl.jaas.config=$scram required;
# The controllers cannot take SCRAM (its credentials live in the metadata log they serve): PLAIN,
# with one user, "controller", the nodes' own. No client of the other listeners can use it.
listener.name.controller.sasl.enabled.mechanisms=PLAIN
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.plain.sasl.jaas.config=$plain required username="controller" password="$KAFKA_CONTROLLER_PASSWORD" user_controller="$KAFKA_CONTROLLER_PASSWORD";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
# admin: the nodes between brokers, kafka-init, operators' tools; controller: the nodes' traffic to
# the controllers. Nobody else, and never User:ANONYMOUS.
super.users=User:admin;User:controller
log.dirs=/var/lib/kafka/data
# Topics are created by kafka-init with their partitions and configs, never by accident.
auto.create.topics.enable=false
default.replication.factor=$KAFKA_REPLICATION_FACTOR
min.insync.replicas=$KAFKA_MIN_INSYNC_REPLICAS
offsets.topic.replication.factor=$KAFKA_REPLICATION_FACTOR
transaction.state.log.replication.factor=$KAFKA_REPLICATION_FACTOR
transaction.state.log.min.isr=$KAFKA_MIN_INSYNC_REPLICAS
group.initial.rebalance.delay.ms=0
PROPERTIES
}

if [ "${1:-}" = "--print" ]; then
  properties
  exit 0
fi

: "${CLUSTER_ID:?}"
config=/tmp/server.properties
properties >"$config"
# For the health check (kafka-broker-api-versions.sh as admin).
printf 'security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config=%s required username="admin" password="%s";\n' \
  "$scram" "$KAFKA_ADMIN_PASSWORD" >/tmp/admin.properties
# A password of .env.example (CHANGE-ME) or any short one is refused: the users are created once,
# when the volume is formatted, and would keep a known password (scripts/new-env.sh makes new ones).
strong() {  # variable name
  if [ "${#2}" -lt 16 ] || [ "$2" = CHANGE-ME ]; then
    echo "kafka-node: $1 must be a password of at least 16 characters (scripts/new-env.sh writes new ones)" >&2
    exit 1
  fi
}
strong KAFKA_CONTROLLER_PASSWORD "$KAFKA_CONTROLLER_PASSWORD"
users=()
for user in admin token-registry content-service apns-dispatcher analytics-ingest analytics-consumer backend; do
  if [ "$user" = admin ]; then
    variable=KAFKA_ADMIN_PASSWORD
  else
    variable=KAFKA_PASSWORD_$(echo "$user" | tr 'a-z-' 'A-Z_')
  fi
  password=${!variable:?$variable is not set}
  strong "$variable" "$password"
  users+=(--add-scram "SCRAM-SHA-512=[name=$user,password=$password]")
done
/opt/kafka/bin/kafka-storage.sh format --ignore-formatted --cluster-id "$CLUSTER_ID" --config "$config" "${users[@]}"
exec /opt/kafka/bin/kafka-server-start.sh "$config"
