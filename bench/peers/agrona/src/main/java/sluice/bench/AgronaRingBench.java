package sluice.bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;

import org.agrona.MutableDirectBuffer;
import org.agrona.concurrent.BackoffIdleStrategy;
import org.agrona.concurrent.BusySpinIdleStrategy;
import org.agrona.concurrent.IdleStrategy;
import org.agrona.concurrent.MessageHandler;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.ringbuffer.OneToOneRingBuffer;
import org.agrona.concurrent.ringbuffer.RingBufferDescriptor;

/**
 * The Agrona side of bench/peers/agrona.ts: records of a given payload size from a producer
 * thread to the consumer (the main thread) through Agrona's OneToOneRingBuffer, as
 * bench/ring.ts moves them through the Sluice ring (worker -> main thread).
 *
 * <p>Same records as the Sluice benchmark: the first four payload bytes carry the sequence number
 * (little-endian), the rest a fixed pattern; the consumer checks every record's sequence number
 * and length. Same ring: a data area of the given capacity (bytes, a power of two) plus Agrona's
 * trailer. Waits: both sides idle with a BackoffIdleStrategy (spin, yield, park) when the ring
 * is full or empty, as both Sluice ring sides do by default, or busy-spin. The consumer reads in
 * batches ({@code read(handler)}: every record up to the end of the data area per call).
 *
 * <p>Protocol, one command per stdin line, one JSON line per command on stdout, so the JVM stays
 * warm across the rounds the Node runner alternates with its own:
 * <pre>
 *   run &lt;write|claim&gt; &lt;payloadBytes&gt; &lt;records&gt; &lt;backoff|spin&gt;
 *     -&gt; {"variant":"write","idle":"backoff","payloadBytes":64,"records":N,"recordsPerS":R,
 *         "cores":C}
 *   quit
 * </pre>
 * {@code write}: {@code OneToOneRingBuffer.write} (copies the record in, publishes it).
 * {@code claim}: {@code tryClaim}, sequence number and payload written into the claimed slot,
 * {@code commit}: the zero-copy path. {@code backoff}: BackoffIdleStrategy on both sides (its
 * defaults: spin, yield, then park 1 us doubling to 1 ms; a park is not woken by the other
 * side); {@code spin}: BusySpinIdleStrategy on both sides, Agrona's lowest-latency choice.
 * {@code cores}: process CPU time / wall time of the run.
 * Usage: {@code java -cp ... sluice.bench.AgronaRingBench <capacityBytes>}.
 */
public final class AgronaRingBench {
  private static final int TYPE_ID = 1;

  private AgronaRingBench() {
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      throw new IllegalArgumentException("usage: AgronaRingBench <capacityBytes>");
    }
    final int capacityBytes = Integer.parseInt(args[0]);
    final BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    System.out.println("{\"ready\":true,\"java\":\"" + System.getProperty("java.version") + "\"}");
    System.out.flush();
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      final String[] words = line.trim().split("\\s+");
      if (words[0].equals("quit")) {
        break;
      }
      if (words.length != 5 || !words[0].equals("run")) {
        throw new IllegalArgumentException("expected 'run <write|claim> <payloadBytes> <records>"
            + " <backoff|spin>' or 'quit', line=\"" + line + "\"");
      }
      final String variant = words[1];
      if (!variant.equals("write") && !variant.equals("claim")) {
        throw new IllegalArgumentException("variant must be write or claim, variant=" + variant);
      }
      final int payloadBytes = Integer.parseInt(words[2]);
      final int records = Integer.parseInt(words[3]);
      final String idle = words[4];
      if (!idle.equals("backoff") && !idle.equals("spin")) {
        throw new IllegalArgumentException("idle must be backoff or spin, idle=" + idle);
      }
      final double[] result = run(variant.equals("claim"), idle.equals("spin"), capacityBytes,
          payloadBytes, records);
      System.out.println("{\"variant\":\"" + variant + "\",\"idle\":\"" + idle
          + "\",\"payloadBytes\":" + payloadBytes
          + ",\"records\":" + records + ",\"recordsPerS\":" + result[0]
          + ",\"cores\":" + result[1] + "}");
      System.out.flush();
    }
  }

  /** Returns {records/s, cores busy}. Throws IllegalStateException on a lost or wrong record. */
  private static double[] run(boolean claim, boolean spin, int capacityBytes, int payloadBytes,
      int records) throws InterruptedException {
    final UnsafeBuffer buffer = new UnsafeBuffer(
        ByteBuffer.allocateDirect(capacityBytes + RingBufferDescriptor.TRAILER_LENGTH));
    final OneToOneRingBuffer ring = new OneToOneRingBuffer(buffer);
    final CountDownLatch start = new CountDownLatch(1);
    final Thread producer = new Thread(
        () -> produce(ring, start, claim, idleStrategy(spin), payloadBytes, records),
        "agrona-producer");
    producer.start();

    final Checker checker = new Checker(payloadBytes);
    final IdleStrategy idle = idleStrategy(spin);
    final com.sun.management.OperatingSystemMXBean os =
        (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
    final long cpuStartNs = os.getProcessCpuTime();
    final long startNs = System.nanoTime();
    start.countDown();
    while (checker.received < records) {
      idle.idle(ring.read(checker));
    }
    final long elapsedNs = System.nanoTime() - startNs;
    final long cpuNs = os.getProcessCpuTime() - cpuStartNs;
    producer.join();
    if (checker.wrong != 0) {
      throw new IllegalStateException(checker.wrong + " of " + records
          + " records out of order or of the wrong length");
    }
    return new double[] {records / (elapsedNs / 1e9), (double) cpuNs / elapsedNs};
  }

  private static IdleStrategy idleStrategy(boolean spin) {
    return spin ? new BusySpinIdleStrategy() : new BackoffIdleStrategy();
  }

  private static void produce(OneToOneRingBuffer ring, CountDownLatch start, boolean claim,
      IdleStrategy idle, int payloadBytes, int records) {
    final UnsafeBuffer src = new UnsafeBuffer(new byte[payloadBytes]);
    for (int i = 4; i < payloadBytes; i++) {
      src.putByte(i, (byte) i);
    }
    final UnsafeBuffer ringBuffer = (UnsafeBuffer) ring.buffer();
    try {
      start.await();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return;
    }
    for (int seq = 0; seq < records; seq++) {
      if (claim) {
        int index = ring.tryClaim(TYPE_ID, payloadBytes);
        if (index < 0) {
          do {
            idle.idle();
          } while ((index = ring.tryClaim(TYPE_ID, payloadBytes)) < 0);
          idle.reset();
        }
        ringBuffer.putInt(index, seq, ByteOrder.LITTLE_ENDIAN);
        ringBuffer.putBytes(index + 4, src, 4, payloadBytes - 4);
        ring.commit(index);
      } else {
        src.putInt(0, seq, ByteOrder.LITTLE_ENDIAN);
        if (!ring.write(TYPE_ID, src, 0, payloadBytes)) {
          do {
            idle.idle();
          } while (!ring.write(TYPE_ID, src, 0, payloadBytes));
          idle.reset();
        }
      }
    }
  }

  /** Counts records and checks each one's sequence number and length. */
  private static final class Checker implements MessageHandler {
    private final int payloadBytes;
    int received;
    int wrong;

    Checker(int payloadBytes) {
      this.payloadBytes = payloadBytes;
    }

    @Override
    public void onMessage(int msgTypeId, MutableDirectBuffer buffer, int index,
        int length) {
      if (msgTypeId != TYPE_ID || length != payloadBytes
          || buffer.getInt(index, ByteOrder.LITTLE_ENDIAN) != received) {
        wrong++;
      }
      received++;
    }
  }
}
