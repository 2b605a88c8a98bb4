package sluice.bench;

import java.io.BufferedReader;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;

/**
 * The Debezium side of bench/peers/debezium.ts: Debezium Embedded (PostgreSQL connector,
 * logical decoding with pgoutput) streams the changes of pgbench_history (inserts) and
 * pgbench_accounts (updates), the two tables and the columns the Sluice bank topology captures,
 * into a file, one JSON change event per line (Json format, schemas off).
 *
 * <p>The consumer writes each batch to the file, forces it to disk (fdatasync), then marks the
 * batch processed: a durable output, as the Sluice journal's batch fsync. Offsets go to a
 * FileOffsetBackingStore. For each event it records the capture-to-consumer lag, the time the
 * consumer got the event minus the event's {@code source.ts_ms} (the commit time PostgreSQL
 * reports), in a histogram of 1 ms buckets.
 *
 * <p>Usage: {@code java -cp ... sluice.bench.DebeziumCaptureBench <port> <database> <dir>}.
 * Prints JSON lines on stdout: {@code {"type":"started"}} once the connector task runs,
 * {@code {"type":"progress","events":N}} every second, and after a {@code stop} line on stdin
 * the totals: {@code {"type":"done","events":N,"bytes":B,"firstEventMs":T0,"lastEventMs":T1,
 * "lagMs":{"p50":..,"p99":..,"p999":..,"max":..},"cpuMs":C}} (cpuMs: the JVM's CPU time since
 * the start, all threads), then exits.
 */
public final class DebeziumCaptureBench {
  /** Lag histogram range: 1 ms buckets up to this many ms; larger lags land in the last one. */
  private static final int LAG_BUCKETS_MS = 600_000;
  private static final byte[] NEWLINE = {'\n'};

  private final FileOutputStream out;
  private final long[] lagBuckets = new long[LAG_BUCKETS_MS + 1];
  private volatile long events;
  private long bytes;
  private long firstEventMs;
  private volatile long lastEventMs;
  private long lagMaxMs;
  private long unparsed;

  private DebeziumCaptureBench(Path file) throws IOException {
    this.out = new FileOutputStream(file.toFile());
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      throw new IllegalArgumentException("usage: DebeziumCaptureBench <port> <database> <dir>");
    }
    final Path dir = Path.of(args[2]);
    final DebeziumCaptureBench bench = new DebeziumCaptureBench(dir.resolve("events.jsonl"));
    final Properties props = config(args[0], args[1], dir);
    final DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
        .using(props)
        .using(new DebeziumEngine.ConnectorCallback() {
          @Override
          public void taskStarted() {
            emit("{\"type\":\"started\"}");
          }
        })
        .using((success, message, error) -> {
          if (!success) {
            emit("{\"type\":\"failed\",\"message\":" + quote(String.valueOf(message)) + "}");
          }
        })
        .notifying(bench::handleBatch)
        .build();
    final ExecutorService executor = Executors.newSingleThreadExecutor();
    executor.execute(engine);

    final Thread progress = new Thread(() -> {
      try {
        for (;;) {
          Thread.sleep(1000);
          emit("{\"type\":\"progress\",\"events\":" + bench.events + "}");
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }, "progress");
    progress.setDaemon(true);
    progress.start();

    final BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line = in.readLine(); line != null && !line.trim().equals("stop");) {
      line = in.readLine();
    }
    engine.close();
    executor.shutdown();
    executor.awaitTermination(60, TimeUnit.SECONDS);
    progress.interrupt();
    emit(bench.summary());
    System.exit(0);
  }

  /** Connector and engine settings; see the class comment of bench/peers/debezium.ts. */
  private static Properties config(String port, String database, Path dir) {
    final Properties p = new Properties();
    p.setProperty("name", "sluice-bench");
    p.setProperty("connector.class", "io.debezium.connector.postgresql.PostgresConnector");
    p.setProperty("offset.storage", "org.apache.kafka.connect.storage.FileOffsetBackingStore");
    p.setProperty("offset.storage.file.filename", dir.resolve("offsets.dat").toString());
    p.setProperty("offset.flush.interval.ms", "1000");
    p.setProperty("database.hostname", "127.0.0.1");
    p.setProperty("database.port", port);
    p.setProperty("database.user", "postgres");
    p.setProperty("database.password", "");
    p.setProperty("database.dbname", database);
    p.setProperty("topic.prefix", "bench");
    p.setProperty("plugin.name", "pgoutput");
    p.setProperty("slot.name", "sluice_bench_debezium");
    p.setProperty("slot.drop.on.stop", "true");
    p.setProperty("publication.name", "sluice_bench_debezium");
    p.setProperty("publication.autocreate.mode", "filtered");
    p.setProperty("table.include.list", "public.pgbench_history,public.pgbench_accounts");
    p.setProperty("column.include.list", String.join(",",
        "public.pgbench_history.tid", "public.pgbench_history.bid", "public.pgbench_history.aid",
        "public.pgbench_history.delta", "public.pgbench_history.mtime",
        "public.pgbench_accounts.aid", "public.pgbench_accounts.bid",
        "public.pgbench_accounts.abalance"));
    // The pgbench tables are loaded before the connector starts: stream changes only, as the
    // Sluice triggers capture only changes made after they are installed.
    p.setProperty("snapshot.mode", "no_data");
    // Match the Sluice topology's pollIntervalMs 5 and batchSizeMax 2000 (Debezium's defaults
    // are 500 ms and 2048): the latency setting of each side, not its default, is compared.
    p.setProperty("poll.interval.ms", "5");
    p.setProperty("max.batch.size", "2048");
    p.setProperty("converter.schemas.enable", "false");
    p.setProperty("key.converter.schemas.enable", "false");
    p.setProperty("value.converter.schemas.enable", "false");
    return p;
  }

  private void handleBatch(List<ChangeEvent<String, String>> records,
      DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer)
      throws InterruptedException {
    final long nowMs = System.currentTimeMillis();
    try {
      for (ChangeEvent<String, String> record : records) {
        final String value = record.value();
        if (value == null) {
          committer.markProcessed(record);
          continue;
        }
        final byte[] b = value.getBytes(StandardCharsets.UTF_8);
        out.write(b);
        out.write(NEWLINE);
        bytes += b.length + 1;
        final long sourceMs = sourceTsMs(value);
        if (sourceMs < 0) {
          unparsed++;
        } else {
          final long lagMs = Math.max(0, nowMs - sourceMs);
          lagBuckets[(int) Math.min(lagMs, LAG_BUCKETS_MS)]++;
          lagMaxMs = Math.max(lagMaxMs, lagMs);
        }
        if (events == 0) {
          firstEventMs = nowMs;
        }
        events++;
      }
      out.getChannel().force(false);
    } catch (IOException e) {
      throw new IllegalStateException("writing change events failed", e);
    }
    lastEventMs = System.currentTimeMillis();
    for (ChangeEvent<String, String> record : records) {
      if (record.value() != null) {
        committer.markProcessed(record);
      }
    }
    committer.markBatchFinished();
  }

  /**
   * The {@code source.ts_ms} of a change event's JSON (the first "ts_ms" after "source":{; the
   * row images before it hold only pgbench's integer and timestamp columns), or -1.
   */
  static long sourceTsMs(String json) {
    final int source = json.indexOf("\"source\":{");
    if (source < 0) {
      return -1;
    }
    final String key = "\"ts_ms\":";
    final int at = json.indexOf(key, source);
    if (at < 0) {
      return -1;
    }
    long v = 0;
    int i = at + key.length();
    final int start = i;
    while (i < json.length() && Character.isDigit(json.charAt(i))) {
      v = v * 10 + (json.charAt(i++) - '0');
    }
    return i == start ? -1 : v;
  }

  private long percentile(double q) {
    long total = 0;
    for (long c : lagBuckets) {
      total += c;
    }
    if (total == 0) {
      return 0;
    }
    final long rank = (long) Math.ceil(q * total);
    long seen = 0;
    for (int ms = 0; ms < lagBuckets.length; ms++) {
      seen += lagBuckets[ms];
      if (seen >= rank) {
        return ms;
      }
    }
    return LAG_BUCKETS_MS;
  }

  private synchronized String summary() {
    final long cpuNs = ((com.sun.management.OperatingSystemMXBean)
        ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    return "{\"type\":\"done\",\"events\":" + events + ",\"bytes\":" + bytes
        + ",\"unparsed\":" + unparsed + ",\"firstEventMs\":" + firstEventMs
        + ",\"lastEventMs\":" + lastEventMs + ",\"lagMs\":{\"p50\":" + percentile(0.50)
        + ",\"p99\":" + percentile(0.99) + ",\"p999\":" + percentile(0.999)
        + ",\"max\":" + lagMaxMs + "},\"cpuMs\":" + cpuNs / 1_000_000 + "}";
  }

  private static synchronized void emit(String line) {
    System.out.println(line);
    System.out.flush();
  }

  private static String quote(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n") + "\"";
  }
}
