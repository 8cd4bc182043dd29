package io.taskstate.spark;

import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

import org.apache.spark.TaskContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Makes a task's deferred group changes durable before Spark reports the task done.
 *
 * <p>Spark calls {@code onTaskSucceeded} on the task thread just before it sends the
 * task's FINISHED status, and {@code onTaskStart} on the same thread while the task
 * context is set (checked in Executor.scala and Task.scala of the pyspark jars we build
 * against). The barrier writes {@code FLUSH <task attempt id>} on the sidecar's barrier
 * socket; the sidecar has every Python worker that holds changes of the attempt commit
 * them, and answers {@code OK <keys>} or {@code FAIL <reason>}.
 *
 * <p>Spark catches and logs what a plugin hook throws, so a failed flush cannot fail the
 * task. It stops the executor instead, before FINISHED can be sent (fail-stop): Spark
 * then runs the task again elsewhere and the retry rolls the batch back.
 *
 * <p>A sidecar that is restarting (the supervisor replaces a killed one) is waited for,
 * and a FLUSH whose connection broke is asked again of the new one: the sidecar journals
 * what a successor must know, and the workers that hold changes attach to the new one
 * (sidecar/flush.py), so it answers truthfully. The sidecar waits out a Redis outage
 * within its flush timeout, so this waits that long and a little more. Only changes that
 * cannot become durable (their worker died, Redis away for the whole flush timeout) end
 * in a fail-stop.
 */
final class FlushBarrier {
  private static final Logger LOG = LoggerFactory.getLogger(FlushBarrier.class);
  /** The executor's exit status after a fail-stop (EX_SOFTWARE). */
  static final int FAIL_STOP_EXIT = 70;

  /** How often a sidecar that is not listening (restarting) is tried again. */
  private static final long RETRY_MS = 100;

  private final Path socket;
  private final long timeoutMs;
  private final ThreadLocal<long[]> current = new ThreadLocal<>();

  FlushBarrier(Path socket, long timeoutMs) {
    this.socket = socket;
    this.timeoutMs = timeoutMs;
  }

  void onTaskStart() {
    TaskContext tc = TaskContext.get();
    if (tc != null) {
      current.set(new long[] {tc.taskAttemptId(), tc.stageId(), tc.partitionId()});
    }
  }

  void onTaskSucceeded() {
    long[] task = current.get();
    current.remove();
    if (task == null) {
      return;
    }
    String answer;
    try {
      answer = ask("FLUSH " + task[0]);
    } catch (IOException e) {
      failStop(task, "the sidecar's flush barrier " + socket + " did not answer (" + e.getMessage()
          + ")");
      return;
    }
    if (answer.startsWith("OK ")) {
      return;
    }
    failStop(task, answer.startsWith("FAIL ") ? answer.substring(5) : answer);
  }

  void onTaskFailed() {
    long[] task = current.get();
    current.remove();
    if (task == null) {
      return;
    }
    try {
      // once: a restarting sidecar is not waited for (its successor keeps the attempt in
      // its journal, which the executor's end removes)
      askOnce("DISCARD " + task[0], System.nanoTime() + timeoutMs * 1_000_000L);
    } catch (IOException e) {
      LOG.debug("taskstate: DISCARD {} not delivered: {}", task[0], e.getMessage());
    }
  }

  /**
   * One line out, one line back, within the timeout; asked again while the sidecar is not
   * listening or when it went away before answering (the supervisor starts a new one).
   */
  String ask(String line) throws IOException {
    long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
    while (true) {
      try {
        return askOnce(line, deadline);
      } catch (SidecarGone e) {
        if (deadline - System.nanoTime() < RETRY_MS * 1_000_000L) {
          throw new IOException("no sidecar answered within " + timeoutMs + " ms (last: "
              + e.getMessage() + ")", e);
        }
        try {
          Thread.sleep(RETRY_MS);
        } catch (InterruptedException ie) {
          Thread.currentThread().interrupt();
          throw new IOException("interrupted while waiting for the sidecar", ie);
        }
      }
    }
  }

  /** No sidecar listens (it is restarting), or it went away before it answered. */
  static final class SidecarGone extends IOException {
    private static final long serialVersionUID = 1L;

    SidecarGone(String what, IOException cause) {
      super(what + (cause == null ? "" : ": " + cause.getMessage()), cause);
    }
  }

  private String askOnce(String line, long deadline) throws IOException {
    try (SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        Selector selector = Selector.open()) {
      try {
        ch.connect(UnixDomainSocketAddress.of(socket));
      } catch (IOException e) {
        throw new SidecarGone("no sidecar listens on " + socket, e);
      }
      ByteBuffer out = ByteBuffer.wrap((line + "\n").getBytes(StandardCharsets.UTF_8));
      try {
        while (out.hasRemaining()) {
          ch.write(out);
        }
      } catch (IOException e) {
        throw new SidecarGone("the sidecar went away before it answered", e);
      }
      ch.configureBlocking(false);
      ch.register(selector, SelectionKey.OP_READ);
      StringBuilder in = new StringBuilder();
      ByteBuffer buf = ByteBuffer.allocate(4096);
      while (true) {
        long left = (deadline - System.nanoTime()) / 1_000_000L;
        if (left <= 0) {
          throw new IOException("no answer within " + timeoutMs + " ms");
        }
        selector.select(left);
        selector.selectedKeys().clear();
        int n;
        try {
          n = ch.read(buf);
        } catch (IOException e) {
          throw new SidecarGone("the sidecar went away before it answered", e);
        }
        if (n < 0) {
          throw new SidecarGone("the sidecar went away before it answered", null);
        }
        buf.flip();
        in.append(StandardCharsets.UTF_8.decode(buf));
        buf.clear();
        int end = in.indexOf("\n");
        if (end >= 0) {
          return in.substring(0, end).trim();
        }
      }
    }
  }

  private void failStop(long[] task, String why) {
    String message = "taskstate FAIL-STOP: task attempt " + task[0] + " (stage " + task[1]
        + ", partition " + task[2] + ") succeeded, but its state changes could not be made "
        + "durable: " + why.replaceAll("[.\\s]+$", "") + ". This executor stops now, before "
        + "the task is reported done; Spark runs the task again and its retry rolls the "
        + "batch back (nothing is lost or counted twice). "
        + "See docs/operations/runbooks.md#fail-stops.";
    LOG.error(message);
    System.err.println(message);
    System.err.flush();
    Runtime.getRuntime().halt(FAIL_STOP_EXIT);
  }
}
