/* Bench.java -- Redisson 4.7.0's row of the benchmark harness (issue 21):
 * the scenarios of bench/rlock_bench.c and bench/peers/peers.js on the real
 * Redisson (JVM defaults, Redisson's defaults), one JSON object on stdout,
 * the same fields as peers.js. bench/run.py runs it:
 *
 *   java -cp redisson-peer.jar rlock.interop.Bench SETTING s1 PORT PAIRS WARMUP SAMPLES
 *   ... s2 PORT TASKS SECONDS WARMUP_S SAMPLES
 *   ... s3 PORT NAME COUNTER ITERS SAMPLES        (one worker)
 *   ... s4 PORT NAME HANDOFFS WARMUP DELAY_US CAP_S SAMPLES
 *   ... s5 PORT LOCKS HOLD_S LEASE_MS
 *   ... s8 PORT NAME COUNTER ITERS READ_PCT WORKER SAMPLES   (one read-mostly worker)
 *   ... s9 PORT NAME INUSE ITERS SAMPLES          (one semaphore worker)
 *
 * SETTING: default (Redisson waits on pub/sub, it has no retry delay to
 * tune); fair: s3 and s4 on getFairLock (RFairLock) instead of getLock. s8
 * runs getReadWriteLock (RReadWriteLock) with the op sequence of
 * rlock_bench.c's s8 (the same xorshift32), s9 getSemaphore (RSemaphore).
 * Owners are Java threads (s1-s4: lock()/unlock() with the watchdog, as a
 * Java service writes it); s5 holds LOCKS locks under the
 * watchdog through lockAsync(threadId), one explicit thread id per lock.
 * Times: System.nanoTime() (CLOCK_MONOTONIC, as the C programs). The JVM is
 * warmed up first (scenario 1: at least 5,000 pairs; 3, 8 and 9: 3,000
 * uncontended iterations per worker; 4: 3,000 per owner). */
package rlock.interop;

import java.io.BufferedReader;
import java.io.FileWriter;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.lang.management.ManagementFactory;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.redisson.Redisson;
import org.redisson.api.RBucket;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;

public final class Bench {
  private static int port;
  private static String setting = "default";

  /* The lock scenarios 3 and 4 take: RFairLock with SETTING fair. */
  private static RLock lockOf(RedissonClient r, String name) {
    return "fair".equals(setting) ? r.getFairLock(name) : r.getLock(name);
  }

  private static RedissonClient client(long watchdogMs) {
    Config cfg = new Config();
    if (watchdogMs > 0) cfg.setLockWatchdogTimeout(watchdogMs);
    cfg.useSingleServer().setAddress("redis://127.0.0.1:" + port);
    return Redisson.create(cfg);
  }

  private static long cpuNs() {
    return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
        .getProcessCpuTime();
  }

  private static long rssKb() throws IOException {
    for (String l : Files.readAllLines(Paths.get("/proc/self/status")))
      if (l.startsWith("VmRSS:")) return Long.parseLong(l.replaceAll("[^0-9]", ""));
    return 0;
  }

  private static void writeSamples(String path, double[] s, int n) throws IOException {
    try (PrintWriter w = new PrintWriter(new FileWriter(path))) {
      for (int i = 0; i < n; i++) w.printf(Locale.ROOT, "%.3f%n", s[i]);
    }
  }

  private static String json(Object... kv) {
    StringBuilder b = new StringBuilder("{");
    for (int i = 0; i < kv.length; i += 2) {
      if (i > 0) b.append(", ");
      b.append('"').append(kv[i]).append("\": ");
      Object v = kv[i + 1];
      if (v instanceof String) b.append('"').append(v).append('"');
      else if (v instanceof Double) b.append(String.format(Locale.ROOT, "%.6f", (Double) v));
      else b.append(v);
    }
    return b.append('}').toString();
  }

  private static String s1(String[] a) throws IOException {
    int pairs = Integer.parseInt(a[0]), warm = Integer.parseInt(a[1]);
    RedissonClient r = client(0);
    RLock l = r.getLock("bench:s1:redisson-java");
    for (int i = 0; i < Math.max(warm, 5000); i++) {
      l.lock();
      l.unlock();
    }
    double[] s = new double[pairs];
    long c0 = cpuNs(), t0 = System.nanoTime();
    for (int i = 0; i < pairs; i++) {
      long x = System.nanoTime();
      l.lock();
      l.unlock();
      s[i] = (System.nanoTime() - x) / 1000.0;
    }
    double el = (System.nanoTime() - t0) / 1e9;
    long c = cpuNs() - c0;
    writeSamples(a[2], s, pairs);
    r.shutdown();
    return json("pairs", pairs, "elapsed_s", el, "cpu_us_per_pair", c / 1000.0 / pairs, "failures", 0);
  }

  private static volatile int phase;

  private static String s2(String[] a) throws Exception {
    int tasks = Integer.parseInt(a[0]);
    double secs = Double.parseDouble(a[1]), warm = Double.parseDouble(a[2]);
    RedissonClient r = client(0);
    List<double[]> samples = new ArrayList<>();
    int[] counts = new int[tasks];
    Thread[] th = new Thread[tasks];
    for (int i = 0; i < tasks; i++) {
      final int k = i;
      double[] s = new double[1 << 20];
      samples.add(s);
      th[i] = new Thread(() -> {
        RLock l = r.getLock("bench:s2:redisson-java:" + k);
        while (phase != 2) {
          int ph = phase;
          long x = System.nanoTime();
          l.lock();
          l.unlock();
          if (ph == 1 && phase == 1 && counts[k] < s.length) s[counts[k]++] = (System.nanoTime() - x) / 1000.0;
        }
      });
      th[i].start();
    }
    Thread.sleep((long) (warm * 1000));
    long c0 = cpuNs(), t0 = System.nanoTime();
    phase = 1;
    Thread.sleep((long) (secs * 1000));
    phase = 2;
    double el = (System.nanoTime() - t0) / 1e9;
    long c = cpuNs() - c0;
    for (Thread t : th) t.join();
    int n = 0;
    for (int x : counts) n += x;
    double[] all = new double[n];
    int o = 0;
    for (int i = 0; i < tasks; i++) {
      System.arraycopy(samples.get(i), 0, all, o, counts[i]);
      o += counts[i];
    }
    writeSamples(a[3], all, n);
    r.shutdown();
    return json("pairs", n, "elapsed_s", el, "tasks", tasks, "failures", 0, "client_cpu_pct",
        100.0 * c / 1e9 / el);
  }

  private static final int S3_WARM = 3000, S3_WARM_HOT = 50; /* warm-up iterations per worker */

  /* Waits until the JIT is quiet: no compilation for 1 s (at most 15 s). */
  private static void jitQuiet() throws InterruptedException {
    java.lang.management.CompilationMXBean jit = ManagementFactory.getCompilationMXBean();
    long quietUntil = System.nanoTime() + 15_000_000_000L, last = -1;
    for (int still = 0; still < 5 && System.nanoTime() < quietUntil; ) {
      Thread.sleep(200);
      long t = jit.getTotalCompilationTime();
      still = t == last ? still + 1 : 0;
      last = t;
    }
  }

  private static void readyGo() throws IOException {
    System.out.println("ready");
    System.out.flush();
    new BufferedReader(new InputStreamReader(System.in)).readLine();
  }

  /* xorshift32, as rlock_bench.c's s8 */
  private static int xs32(int[] x) {
    x[0] ^= x[0] << 13;
    x[0] ^= x[0] >>> 17;
    x[0] ^= x[0] << 5;
    return x[0];
  }

  /* iters read-mostly ops on rw (reads GET counter, writes GET and SET
   * counter+1) in the sequence of seed; lines (if not null) gets
   * "<r|w> <acquire wait in us> <counter value read>" per op */
  private static void s8Loop(org.redisson.api.RReadWriteLock rw, RBucket<String> b, int iters, int pct, int seed,
      StringBuilder lines) {
    int[] x = {seed};
    RLock rd = rw.readLock(), wr = rw.writeLock();
    for (int i = 0; i < iters; i++) {
      boolean read = Integer.remainderUnsigned(xs32(x), 100) < pct;
      RLock l = read ? rd : wr;
      long t = System.nanoTime();
      l.lock();
      double w = (System.nanoTime() - t) / 1000.0;
      String v0 = b.get();
      long v = v0 == null ? 0 : Long.parseLong(v0);
      if (!read) b.set(Long.toString(v + 1));
      l.unlock();
      if (lines != null)
        lines.append(read ? 'r' : 'w').append(' ').append(String.format(Locale.ROOT, "%.3f", w)).append(' ')
            .append(v).append('\n');
    }
  }

  private static String s8(String[] a) throws Exception {
    String name = a[0], counter = a[1];
    int iters = Integer.parseInt(a[2]), pct = Integer.parseInt(a[3]), worker = Integer.parseInt(a[4]);
    RedissonClient r = client(0);
    String own = name + ":warm:" + ProcessHandle.current().pid();
    s8Loop(r.getReadWriteLock(own), r.getBucket(own + ":counter", StringCodec.INSTANCE), S3_WARM, pct, 7,
        new StringBuilder());
    r.getBucket(own + ":counter").delete();
    s8Loop(r.getReadWriteLock(name + ":warm"), r.getBucket(counter + ":warm", StringCodec.INSTANCE), S3_WARM_HOT,
        pct, 11, new StringBuilder());
    jitQuiet();
    RBucket<String> b = r.getBucket(counter, StringCodec.INSTANCE);
    s8Loop(r.getReadWriteLock(name), r.getBucket(counter + ":warm2", StringCodec.INSTANCE), 20, pct, worker + 13,
        null);
    readyGo();
    StringBuilder lines = new StringBuilder();
    long c0 = cpuNs(), start = System.nanoTime();
    s8Loop(r.getReadWriteLock(name), b, iters, pct, (int) (worker * 2654435761L + 1), lines);
    long end = System.nanoTime(), c = cpuNs() - c0;
    Files.write(Paths.get(a[5]), lines.toString().getBytes(StandardCharsets.UTF_8));
    r.shutdown();
    return json("start_ns", Long.toString(start), "end_ns", Long.toString(end), "iters", iters, "failures", 0,
        "cpu_s", c / 1e9);
  }

  /* iters x (acquire 1 permit, INCR inuse, DECR inuse, release 1); lines (if
   * not null) gets "<acquire wait in us> <INCR's answer>" per iteration */
  private static void s9Loop(org.redisson.api.RSemaphore sem, org.redisson.api.RAtomicLong inuse, int iters,
      StringBuilder lines) throws InterruptedException {
    for (int i = 0; i < iters; i++) {
      long t = System.nanoTime();
      sem.acquire();
      double w = (System.nanoTime() - t) / 1000.0;
      long n = inuse.incrementAndGet();
      inuse.decrementAndGet();
      sem.release();
      if (lines != null) lines.append(String.format(Locale.ROOT, "%.3f", w)).append(' ').append(n).append('\n');
    }
  }

  private static String s9(String[] a) throws Exception {
    String name = a[0], inuse = a[1];
    int iters = Integer.parseInt(a[2]);
    RedissonClient r = client(0);
    String own = name + ":warm:" + ProcessHandle.current().pid();
    org.redisson.api.RSemaphore ws = r.getSemaphore(own);
    ws.trySetPermits(1);
    s9Loop(ws, r.getAtomicLong(own + ":inuse"), S3_WARM, new StringBuilder());
    ws.delete();
    r.getAtomicLong(own + ":inuse").delete();
    jitQuiet();
    org.redisson.api.RSemaphore sem = r.getSemaphore(name);
    org.redisson.api.RAtomicLong in = r.getAtomicLong(inuse);
    s9Loop(sem, r.getAtomicLong(inuse + ":warm"), 20, null);
    readyGo();
    StringBuilder lines = new StringBuilder();
    long c0 = cpuNs(), start = System.nanoTime();
    s9Loop(sem, in, iters, lines);
    long end = System.nanoTime(), c = cpuNs() - c0;
    Files.write(Paths.get(a[3]), lines.toString().getBytes(StandardCharsets.UTF_8));
    r.shutdown();
    return json("start_ns", Long.toString(start), "end_ns", Long.toString(end), "iters", iters, "failures", 0,
        "cpu_s", c / 1e9);
  }

  /* iters x (lock, GET counter, SET counter+1, unlock); lines (if not null)
   * gets "<counter value read> <acquire wait in us> <acquire returned ns>
   * <unlock called ns>" per iteration (System.nanoTime() is CLOCK_MONOTONIC
   * on Linux: run.py compares it across processes, as rlock_bench.c's) */
  private static void s3Loop(RLock l, RBucket<String> b, int iters, StringBuilder lines) {
    for (int i = 0; i < iters; i++) {
      long x = System.nanoTime();
      l.lock();
      long acq = System.nanoTime();
      double w = (acq - x) / 1000.0;
      String v0 = b.get();
      long v = v0 == null ? 0 : Long.parseLong(v0);
      b.set(Long.toString(v + 1));
      long rel = System.nanoTime();
      l.unlock();
      if (lines != null)
        lines.append(v).append(' ').append(String.format(Locale.ROOT, "%.3f", w)).append(' ').append(acq).append(' ')
            .append(rel).append('\n');
    }
  }

  private static String s3(String[] a) throws Exception {
    String name = a[0], counter = a[1];
    int iters = Integer.parseInt(a[2]);
    RedissonClient r = client(0);
    RLock l = lockOf(r, name);
    RBucket<String> b = r.getBucket(counter, StringCodec.INSTANCE);
    /* The JVM warmed up, as in s1 and s4 (20 contended pairs are no JIT
     * warm-up: 8 cold JVMs took 7 s for 800 iterations, their C2 compiler
     * threads using most of the CPU): S3_WARM uncontended iterations of the
     * loop below on a lock and counter of this JVM's own, then S3_WARM_HOT
     * on a lock and counter that all workers share (the contended path:
     * pub/sub wake-ups, subscribe and unsubscribe), then a wait until the JIT
     * is quiet (no compilation for 1 s; at most 15 s). */
    String own = name + ":warm:" + ProcessHandle.current().pid();
    /* (the warm-up records its lines too: the same profile, no deoptimization when measuring) */
    s3Loop(lockOf(r, own), r.getBucket(own + ":counter", StringCodec.INSTANCE), S3_WARM, new StringBuilder());
    r.getBucket(own + ":counter").delete();
    s3Loop(lockOf(r, name + ":warm"), r.getBucket(counter + ":warm", StringCodec.INSTANCE), S3_WARM_HOT, new StringBuilder());
    jitQuiet();
    for (int i = 0; i < 20; i++) {
      l.lock();
      l.unlock();
    }
    readyGo();
    StringBuilder lines = new StringBuilder();
    long c0 = cpuNs(), start = System.nanoTime();
    s3Loop(l, b, iters, lines);
    long end = System.nanoTime(), c = cpuNs() - c0;
    Files.write(Paths.get(a[3]), lines.toString().getBytes(StandardCharsets.UTF_8));
    r.shutdown();
    return json("start_ns", Long.toString(start), "end_ns", Long.toString(end), "iters", iters, "failures", 0,
        "cpu_s", c / 1e9);
  }

  /* s4: two owners (threads with a client each, as two processes would have)
   * hand the lock to each other; the relay (a SynchronousQueue) is outside
   * the measured interval. Per handoff, as rlock_bench.c and peers.js, one
   * line "RET CALL": lock returned in the other owner minus unlock returned
   * (RET), and minus unlock called (CALL, the figure compared across
   * implementations: Redisson's unlock() is two round trips, the unlock
   * script that publishes and then a DEL of its unlock latch, so the waiter
   * often returns before unlock() does and RET is negative). Both owners are
   * threads of this JVM: one clock, System.nanoTime(). */
  private static String s4(String[] a) throws Exception {
    String name = a[0];
    int handoffs = Integer.parseInt(a[1]), warm = Integer.parseInt(a[2]);
    long delayUs = Long.parseLong(a[3]);
    double cap = Double.parseDouble(a[4]);
    int total = handoffs + warm;
    long[] rel = new long[total + 2], relc = new long[total + 2], acq = new long[total + 2];
    java.util.Arrays.fill(rel, -1);
    java.util.Arrays.fill(relc, -1);
    java.util.Arrays.fill(acq, -1);
    SynchronousQueue<Character> toA = new SynchronousQueue<>(), toB = new SynchronousQueue<>();
    RedissonClient ra = client(0), rb = client(0);
    /* the JVM warmed up (the peers' few warm-up handoffs are no JIT warm-up) */
    for (RedissonClient c : new RedissonClient[] {ra, rb}) {
      RLock w = lockOf(c, name + ":warm");
      for (int i = 0; i < 3000; i++) {
        w.lock();
        w.unlock();
      }
    }
    long deadline = System.nanoTime() + (long) (cap * 1e9);
    Thread[] th = new Thread[2];
    for (int role = 0; role < 2; role++) {
      final boolean first = role == 0;
      RLock l = lockOf(first ? ra : rb, name);
      SynchronousQueue<Character> in = first ? toA : toB, out = first ? toB : toA;
      th[role] = new Thread(() -> {
        try {
          int h = first ? 0 : 1;
          if (first) l.lock();
          else {
            if (in.take() != 'G') return;
            l.lock();
            acq[0] = System.nanoTime();
          }
          for (;;) {
            if (h >= total || System.nanoTime() > deadline) {
              out.put('S');
              l.unlock();
              break;
            }
            out.put('G');
            LockSupport.parkNanos(delayUs * 1000);
            relc[h] = System.nanoTime();
            l.unlock();
            rel[h] = System.nanoTime();
            if (in.take() != 'G') break;
            l.lock();
            acq[h + 1] = System.nanoTime();
            h += 2;
          }
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      });
      th[role].start();
    }
    long t0 = System.nanoTime();
    boolean stalled = false;
    for (Thread t : th) {
      long left = deadline + 3_000_000_000L - System.nanoTime();
      t.join(Math.max(1, left / 1_000_000));
      stalled |= t.isAlive();
    }
    double el = (System.nanoTime() - t0) / 1e9;
    StringBuilder lines = new StringBuilder();
    int n = 0, k = 0;
    for (int h = 0; h < total; h++) {
      if (acq[h] < 0) break;
      n++;
      if (h >= warm && rel[h] >= 0) {
        lines.append(String.format(Locale.ROOT, "%.3f %.3f%n", (acq[h] - rel[h]) / 1000.0,
            (acq[h] - relc[h]) / 1000.0));
        k++;
      }
    }
    Files.write(Paths.get(a[5]), lines.toString().getBytes(StandardCharsets.UTF_8));
    String out = json("handoffs", n, "recorded", k, "elapsed_s", el, "capped", n < total, "stalled", stalled,
        "failures", 0);
    if (stalled) {
      System.out.println(out);
      System.out.flush();
      Runtime.getRuntime().halt(0);
    }
    ra.shutdown();
    rb.shutdown();
    return out;
  }

  /* INFO of the server on a raw socket: total_commands_processed and the
   * script calls (EVALSHA + EVAL), as peers.js's serverCounts. */
  private static long[] serverCounts() throws IOException {
    try (Socket so = new Socket("127.0.0.1", port)) {
      OutputStream o = so.getOutputStream();
      InputStream in = so.getInputStream();
      o.write("INFO all\r\n".getBytes(StandardCharsets.US_ASCII));
      o.flush();
      StringBuilder hdr = new StringBuilder();
      int ch;
      while ((ch = in.read()) != '\n' && ch >= 0) hdr.append((char) ch);
      int len = Integer.parseInt(hdr.toString().trim().substring(1));
      byte[] body = in.readNBytes(len);
      String info = new String(body, StandardCharsets.UTF_8);
      long cmds = 0, scripts = 0;
      for (String l : info.split("\r\n")) {
        if (l.startsWith("total_commands_processed:")) cmds = Long.parseLong(l.substring(25).trim());
        if (l.startsWith("cmdstat_evalsha:calls=") || l.startsWith("cmdstat_eval:calls="))
          scripts += Long.parseLong(l.replaceAll("^[^=]*=([0-9]+).*$", "$1"));
      }
      return new long[] {cmds, scripts};
    }
  }

  private static String s5(String[] a) throws Exception {
    int n = Integer.parseInt(a[0]);
    double hold = Double.parseDouble(a[1]);
    long lease = Long.parseLong(a[2]);
    long rssBase = rssKb();
    RedissonClient r = client(lease);
    long rssClient = rssKb();
    List<RLock> locks = new ArrayList<>(n);
    String[] keys = new String[n];
    long a0 = System.nanoTime();
    final int batch = 500;
    for (int i = 0; i < n; i += batch) {
      List<CompletableFuture<Void>> fs = new ArrayList<>();
      for (int j = i; j < Math.min(n, i + batch); j++) {
        keys[j] = "bench:s5:redisson-java:" + j;
        RLock l = r.getLock(keys[j]);
        locks.add(l);
        fs.add(l.lockAsync(j + 1).toCompletableFuture());
      }
      CompletableFuture.allOf(fs.toArray(new CompletableFuture[0])).join();
    }
    double acquireS = (System.nanoTime() - a0) / 1e9;
    System.gc();
    long rssHeld = rssKb();
    long[] sc0 = serverCounts();
    long c0 = cpuNs(), t0 = System.nanoTime();
    Thread.sleep((long) (hold * 1000));
    double el = (System.nanoTime() - t0) / 1e9;
    long c = cpuNs() - c0;
    long[] sc1 = serverCounts();
    long rssEnd = rssKb();
    long present = 0;
    for (int i = 0; i < n; i += 1000)
      present += r.getKeys().countExists(java.util.Arrays.copyOfRange(keys, i, Math.min(n, i + 1000)));
    for (int i = 0; i < n; i += batch) {
      List<CompletableFuture<Void>> fs = new ArrayList<>();
      for (int j = i; j < Math.min(n, i + batch); j++)
        fs.add(locks.get(j).unlockAsync(j + 1).toCompletableFuture().exceptionally(e -> null));
      CompletableFuture.allOf(fs.toArray(new CompletableFuture[0])).join();
    }
    r.shutdown();
    return json("locks", n, "acquire_s", acquireS, "hold_s", el,
        "server_commands_per_s", (sc1[0] - sc0[0] - 1) / el,
        "server_script_calls_per_s", (sc1[1] - sc0[1]) / el,
        "client_cpu_pct", 100.0 * c / 1e9 / el,
        "rss_kb_base", rssBase, "rss_kb_client", rssClient, "rss_kb_held", rssHeld, "rss_kb_end", rssEnd,
        "rss_bytes_per_lock", (rssEnd - rssClient) * 1024.0 / n,
        "still_held", present, "lost", 0, "failures", 0);
  }

  public static void main(String[] args) throws Exception {
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
    System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
    if (args.length < 3) {
      System.err.println("usage: Bench SETTING SCENARIO PORT ARGS...");
      System.exit(64);
    }
    setting = args[0];
    port = Integer.parseInt(args[2]);
    String[] rest = java.util.Arrays.copyOfRange(args, 3, args.length);
    String out;
    switch (args[1]) {
      case "s1": out = s1(rest); break;
      case "s2": out = s2(rest); break;
      case "s3": out = s3(rest); break;
      case "s4": out = s4(rest); break;
      case "s5": out = s5(rest); break;
      case "s8": out = s8(rest); break;
      case "s9": out = s9(rest); break;
      default:
        System.err.println("unknown scenario " + args[1]);
        System.exit(64);
        return;
    }
    System.out.println(out);
    System.out.flush();
    System.exit(0);
  }
}
