/* Peer.java -- a Java service using Redisson 4.7.0, driven by rlock's C
 * interop tests (tests/test_redisson.c) over stdin/stdout.
 *
 * Usage: java -jar redisson-peer.jar MODE ADDRESSES [--watchdog MS] [--scan MS]
 *   MODE single    ADDRESSES = redis://127.0.0.1:PORT
 *   MODE sentinel  ADDRESSES = MASTER_NAME,redis://127.0.0.1:P1,redis://...
 *   MODE cluster   ADDRESSES = redis://127.0.0.1:P1,redis://...
 *   --watchdog MS  Config.lockWatchdogTimeout (Redisson's default 30000)
 *   --scan MS      Sentinel/Cluster scan interval (Redisson's default 1000/5000)
 *
 * It prints "ready <client id>" once connected. Then each input line is
 * "<worker> <command> [args]": the worker (any word) is a Java thread of its
 * own, made on first use, which runs its commands one after another, so a
 * worker is one lock owner ("<client id>:<its thread id>") and a blocking
 * lock() of one worker never holds up the others. Each command's answer is
 * one line "<worker> <answer>", printed when the command is done (answers of
 * different workers may come in any order). A failed call answers
 * "<worker> err <exception class>: <message>". "quit" (no worker) ends the
 * program; so does the end of the input.
 *
 * Commands (on the worker's current lock, set by getLock):
 *   getLock NAME             ok
 *   lock [LEASE_MS]          ok (no lease, or -1: the watchdog)
 *   tryLock WAIT_MS [LEASE]  true | false
 *   unlock                   ok
 *   forceUnlock              true | false
 *   isLocked                 true | false
 *   isHeld                   true | false (isHeldByCurrentThread)
 *   getHoldCount             a number
 *   remainTimeToLive         a number (ms; -2 no key, -1 no TTL)
 *   owner                    the hash field of this worker's holds
 *   ping                     pong (the worker is idle: its earlier commands are done)
 *   parked WORKER            true if WORKER's thread waits on a lock entry's
 *                            latch (java.util.concurrent.Semaphore): its lock()
 *                            or acquire() has tried, subscribed and sleeps until
 *                            a message (or its TTL)
 *
 * Semaphore and count-down latch (issue 25), on the worker's current one:
 *   getSemaphore NAME        ok (RSemaphore)
 *   semTrySetPermits N       true | false
 *   semAcquire N             ok (blocks until taken)
 *   semTryAcquire N WAIT_MS  true | false
 *   semRelease N             ok
 *   semAvailable             a number
 *   getLatch NAME            ok (RCountDownLatch)
 *   latchTrySetCount N       true | false
 *   latchCountDown           ok
 *   latchAwait WAIT_MS       true | false
 *   latchCount               a number
 *
 * Lock family (issue 24): each sets the worker's current lock, so lock,
 * tryLock, unlock... above work on it:
 *   getFairLock NAME, getNonReentrantLock NAME, getNonReentrantFairLock NAME,
 *   getSpinLock NAME, getFencedLock NAME     ok
 *   getReadLock NAME         ok (getReadWriteLock(NAME).readLock())
 *   getWriteLock NAME        ok (getReadWriteLock(NAME).writeLock())
 *   fencedLockAndGetToken [LEASE_MS]         the token (fenced lock)
 *   fencedTryLockAndGetToken WAIT_MS [LEASE] the token, or null
 *   fencedToken              the last token issued, or null
 *
 * Permit-expirable semaphore (issue 25), on the worker's current one; a
 * LEASE_MS of -1 (or none) is Redisson's permit without expiry:
 *   getPermitSemaphore NAME  ok (RPermitExpirableSemaphore)
 *   pesTrySetPermits N       true | false
 *   pesAcquire [LEASE_MS]    the permit id (blocks until taken)
 *   pesTryAcquire WAIT_MS [LEASE_MS]  the permit id, or null
 *   pesRelease ID            ok (any client's id)
 *   pesTryRelease ID         true | false
 *   pesAvailable             a number (availablePermits)
 *   pesAcquired              a number (acquiredPermits)
 *   pesPermits               a number (getPermits)
 *   pesLeaseTime ID          ms left (-1: no expiry)
 *   pesUpdateLeaseTime ID LEASE_MS  true | false
 */
package rlock.interop;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RCountDownLatch;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

public final class Peer {
  private static PrintStream out;
  private static RedissonClient redisson;
  private static final Map<String, Worker> workers = new ConcurrentHashMap<>();

  private static synchronized void answer(String worker, String text) {
    out.println(worker + " " + text);
    out.flush();
  }

  /** One lock owner: a thread running its commands in order. */
  private static final class Worker extends Thread {
    private final String name;
    private final LinkedBlockingQueue<String[]> queue = new LinkedBlockingQueue<>();
    private RLock lock;
    private RSemaphore sem;
    private RCountDownLatch latch;
    private RPermitExpirableSemaphore pes;

    Worker(String name) {
      this.name = name;
      setDaemon(true);
      setName("peer-" + name);
    }

    @Override
    public void run() {
      for (;;) {
        String[] cmd;
        try {
          cmd = queue.take();
        } catch (InterruptedException e) {
          return;
        }
        String reply;
        try {
          reply = run(cmd);
        } catch (Throwable e) {
          Throwable c = e;
          while (c.getCause() != null && c.getMessage() == null) c = c.getCause();
          String msg = String.valueOf(c.getMessage()).replace('\n', ' ');
          reply = "err " + c.getClass().getSimpleName() + ": " + msg;
        }
        answer(name, reply);
      }
    }

    private RLock lock() {
      if (lock == null) throw new IllegalStateException("getLock first");
      return lock;
    }

    private RFencedLock fenced() {
      if (!(lock() instanceof RFencedLock)) throw new IllegalStateException("getFencedLock first");
      return (RFencedLock) lock;
    }

    private RPermitExpirableSemaphore pes() {
      if (pes == null) throw new IllegalStateException("getPermitSemaphore first");
      return pes;
    }

    private String run(String[] c) throws Exception {
      switch (c[0]) {
        case "getLock":
          lock = redisson.getLock(c[1]);
          return "ok";
        case "lock":
          if (c.length > 1 && Long.parseLong(c[1]) > 0)
            lock().lock(Long.parseLong(c[1]), TimeUnit.MILLISECONDS);
          else
            lock().lock();
          return "ok";
        case "tryLock": {
          long wait = Long.parseLong(c[1]);
          long lease = c.length > 2 ? Long.parseLong(c[2]) : -1;
          return String.valueOf(lock().tryLock(wait, lease, TimeUnit.MILLISECONDS));
        }
        case "unlock":
          lock().unlock();
          return "ok";
        case "forceUnlock":
          return String.valueOf(lock().forceUnlock());
        case "isLocked":
          return String.valueOf(lock().isLocked());
        case "isHeld":
          return String.valueOf(lock().isHeldByCurrentThread());
        case "getHoldCount":
          return String.valueOf(lock().getHoldCount());
        case "remainTimeToLive":
          return String.valueOf(lock().remainTimeToLive());
        case "owner":
          return redisson.getId() + ":" + Thread.currentThread().getId();
        case "ping":
          return "pong";
        case "parked": {
          Worker w = workers.get(c[1]);
          if (w == null) return "false";
          for (StackTraceElement e : w.getStackTrace())
            if (e.getClassName().equals("java.util.concurrent.Semaphore")) return "true";
          return "false";
        }
        case "getSemaphore":
          sem = redisson.getSemaphore(c[1]);
          return "ok";
        case "semTrySetPermits":
          return String.valueOf(sem.trySetPermits(Integer.parseInt(c[1])));
        case "semAcquire":
          sem.acquire(Integer.parseInt(c[1]));
          return "ok";
        case "semTryAcquire":
          return String.valueOf(sem.tryAcquire(Integer.parseInt(c[1]), Long.parseLong(c[2]), TimeUnit.MILLISECONDS));
        case "semRelease":
          sem.release(Integer.parseInt(c[1]));
          return "ok";
        case "semAvailable":
          return String.valueOf(sem.availablePermits());
        case "getLatch":
          latch = redisson.getCountDownLatch(c[1]);
          return "ok";
        case "latchTrySetCount":
          return String.valueOf(latch.trySetCount(Long.parseLong(c[1])));
        case "latchCountDown":
          latch.countDown();
          return "ok";
        case "latchAwait":
          return String.valueOf(latch.await(Long.parseLong(c[1]), TimeUnit.MILLISECONDS));
        case "latchCount":
          return String.valueOf(latch.getCount());
        // the lock family (issue 24): each sets the worker's lock, so lock,
        // tryLock, unlock... above work on it
        case "getFairLock":
          lock = redisson.getFairLock(c[1]);
          return "ok";
        case "getNonReentrantLock":
          lock = redisson.getNonReentrantLock(c[1]);
          return "ok";
        case "getNonReentrantFairLock":
          lock = redisson.getNonReentrantFairLock(c[1]);
          return "ok";
        case "getSpinLock":
          lock = redisson.getSpinLock(c[1]);
          return "ok";
        case "getReadLock":
          lock = redisson.getReadWriteLock(c[1]).readLock();
          return "ok";
        case "getWriteLock":
          lock = redisson.getReadWriteLock(c[1]).writeLock();
          return "ok";
        case "getFencedLock":
          lock = redisson.getFencedLock(c[1]);
          return "ok";
        case "fencedLockAndGetToken":
          if (c.length > 1 && Long.parseLong(c[1]) > 0)
            return String.valueOf(fenced().lockAndGetToken(Long.parseLong(c[1]), TimeUnit.MILLISECONDS));
          return String.valueOf(fenced().lockAndGetToken());
        case "fencedTryLockAndGetToken": {
          long wait = Long.parseLong(c[1]);
          if (c.length > 2)
            return String.valueOf(fenced().tryLockAndGetToken(wait, Long.parseLong(c[2]), TimeUnit.MILLISECONDS));
          return String.valueOf(fenced().tryLockAndGetToken(wait, TimeUnit.MILLISECONDS));
        }
        case "fencedToken":
          return String.valueOf(fenced().getToken());
        case "getPermitSemaphore":
          pes = redisson.getPermitExpirableSemaphore(c[1]);
          return "ok";
        case "pesTrySetPermits":
          return String.valueOf(pes().trySetPermits(Integer.parseInt(c[1])));
        case "pesAcquire":
          if (c.length > 1 && Long.parseLong(c[1]) > 0)
            return pes().acquire(Long.parseLong(c[1]), TimeUnit.MILLISECONDS);
          return pes().acquire();
        case "pesTryAcquire": {
          long wait = Long.parseLong(c[1]);
          long lease = c.length > 2 ? Long.parseLong(c[2]) : -1;
          return String.valueOf(pes().tryAcquire(wait, lease, TimeUnit.MILLISECONDS));
        }
        case "pesRelease":
          pes().release(c[1]);
          return "ok";
        case "pesTryRelease":
          return String.valueOf(pes().tryRelease(c[1]));
        case "pesAvailable":
          return String.valueOf(pes().availablePermits());
        case "pesAcquired":
          return String.valueOf(pes().acquiredPermits());
        case "pesPermits":
          return String.valueOf(pes().getPermits());
        case "pesLeaseTime":
          return String.valueOf(pes().getLeaseTime(c[1]));
        case "pesUpdateLeaseTime":
          return String.valueOf(pes().updateLeaseTime(c[1], Long.parseLong(c[2]), TimeUnit.MILLISECONDS));
        default:
          throw new IllegalArgumentException("unknown command " + c[0]);
      }
    }
  }

  private static Config config(String mode, String addresses, long watchdog, int scan) {
    Config cfg = new Config();
    if (watchdog > 0) cfg.setLockWatchdogTimeout(watchdog);
    String[] a = addresses.split(",");
    switch (mode) {
      case "single":
        cfg.useSingleServer().setAddress(a[0]);
        break;
      case "sentinel": {
        var s = cfg.useSentinelServers().setMasterName(a[0]).setCheckSentinelsList(false);
        for (int i = 1; i < a.length; i++) s.addSentinelAddress(a[i]);
        if (scan > 0) s.setScanInterval(scan);
        break;
      }
      case "cluster": {
        var s = cfg.useClusterServers();
        for (String x : a) s.addNodeAddress(x);
        if (scan > 0) s.setScanInterval(scan);
        break;
      }
      default:
        throw new IllegalArgumentException("unknown mode " + mode + " (single, sentinel, cluster)");
    }
    return cfg;
  }

  public static void main(String[] args) throws Exception {
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
    System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
    out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, StandardCharsets.UTF_8);
    System.setOut(System.err); /* nothing but answers on stdout */
    if (args.length < 2) {
      System.err.println("usage: redisson-peer MODE ADDRESSES [--watchdog MS] [--scan MS]");
      System.exit(64);
    }
    long watchdog = 0;
    int scan = 0;
    for (int i = 2; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--watchdog": watchdog = Long.parseLong(args[i + 1]); break;
        case "--scan": scan = Integer.parseInt(args[i + 1]); break;
        default:
          System.err.println("unknown option " + args[i]);
          System.exit(64);
      }
    }
    redisson = Redisson.create(config(args[0], args[1], watchdog, scan));
    answer("ready", redisson.getId());
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      line = line.trim();
      if (line.isEmpty()) continue;
      if (line.equals("quit")) break;
      String[] w = line.split(" ", 2);
      if (w.length < 2) {
        answer(w[0], "err IllegalArgumentException: no command");
        continue;
      }
      Worker k = workers.computeIfAbsent(w[0], n -> {
        Worker x = new Worker(n);
        x.start();
        return x;
      });
      k.queue.add(w[1].trim().split(" +"));
    }
    redisson.shutdown(0, 2, TimeUnit.SECONDS);
    System.exit(0);
  }
}
