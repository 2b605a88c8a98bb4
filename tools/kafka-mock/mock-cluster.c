/* Kafka mock cluster on loopback for tests: librdkafka's rd_kafka_mock_cluster (rdkafka_mock.h).
 * Usage: mock-cluster BROKERS [TOPIC:PARTITIONS ...]
 * Prints the bootstrap servers ("127.0.0.1:port,...") as the first stdout line, then serves until
 * stdin closes or SIGTERM. Stdin lines "topic NAME PARTITIONS" create a topic and answer
 * "ok NAME" or "error NAME <reason>": the mock does not implement CreateTopics, so kafkajs'
 * admin.createTopics cannot be used (see engine/bus/kafka/mock-cluster.ts). Stdin lines
 * "errors APIKEY CODE COUNT" make the next COUNT requests of that API key (e.g. 26 EndTxn), from
 * any client, fail with that Kafka error code (e.g. 47 INVALID_PRODUCER_EPOCH) and answer
 * "ok errors APIKEY": for tests of how a client handles broker errors the mock never produces
 * by itself (it does not fence producers). COUNT is at most 64. */
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
  int apikey, code, count;
  while (fgets(line, sizeof line, stdin)) {
    if (sscanf(line, "topic %255s %d", name, &partitions) == 2) create(mc, name, partitions);
    else if (sscanf(line, "errors %d %d %d", &apikey, &code, &count) == 3 && count >= 1 && count <= 64) {
      rd_kafka_resp_err_t errs[64];
      for (int i = 0; i < count; i++) errs[i] = (rd_kafka_resp_err_t)code;
      rd_kafka_mock_push_request_errors_array(mc, (int16_t)apikey, (size_t)count, errs);
      printf("ok errors %d\n", apikey);
      fflush(stdout);
    }
  }
  rd_kafka_mock_cluster_destroy(mc);
  rd_kafka_destroy(rk);
  return 0;
}
