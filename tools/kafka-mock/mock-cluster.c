/* Kafka mock cluster on loopback for tests: librdkafka's rd_kafka_mock_cluster (rdkafka_mock.h).
 * Usage: mock-cluster BROKERS [TOPIC:PARTITIONS ...]
 * Prints the bootstrap servers ("127.0.0.1:port,...") as the first stdout line, then serves until
 * stdin closes or SIGTERM. Stdin lines "topic NAME PARTITIONS" create a topic and answer
 * "ok NAME" or "error NAME <reason>": the mock does not implement CreateTopics, so kafkajs'
 * admin.createTopics cannot be used (see engine/bus/kafka/mock-cluster.ts). */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int create(rd_kafka_mock_cluster_t *mc, const char *name, int partitions) {
  rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(mc, name, partitions, 1);
  if (err) printf("error %s %s\n", name, rd_kafka_err2str(err)); else printf("ok %s\n", name);
  return fflush(stdout), err ? 1 : 0;
}

int main(int argc, char **argv) {
  char errstr[256], line[512], name[256];
  int brokers = argc > 1 ? atoi(argv[1]) : 1, partitions;
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
  if (!rk || brokers < 1) { fprintf(stderr, "mock-cluster: %s\n", rk ? "BROKERS must be >= 1" : errstr); return 2; }
  rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, brokers);
  if (!mc) { fprintf(stderr, "mock-cluster: rd_kafka_mock_cluster_new failed\n"); return 2; }
  printf("%s\n", rd_kafka_mock_cluster_bootstraps(mc));
  fflush(stdout);
  for (int i = 2; i < argc; i++)
    if (sscanf(argv[i], "%255[^:]:%d", name, &partitions) != 2 || create(mc, name, partitions)) return 2;
  while (fgets(line, sizeof line, stdin))
    if (sscanf(line, "topic %255s %d", name, &partitions) == 2) create(mc, name, partitions);
  rd_kafka_mock_cluster_destroy(mc);
  rd_kafka_destroy(rk);
  return 0;
}
