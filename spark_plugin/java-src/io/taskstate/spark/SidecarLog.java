package io.taskstate.spark;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The sidecar's log file, {@code <runDir>/jvm-<pid>.log}: the sidecars' stderr, appended.
 *
 * <p>The sidecars write it themselves (it outlives a killed executor JVM). This class
 * forwards what an operator must see to the executor's own log (its stderr): the
 * sidecar's warnings and errors (JSON lines whose level is warning, error or critical,
 * such as a Redis without persistence) and every line that is not JSON (a Python
 * traceback, {@code No module named ...}). And it quotes the log's end for the error a
 * failed start raises.
 */
final class SidecarLog {
  private static final Logger LOG = LoggerFactory.getLogger(SidecarLog.class);
  private static final int MAX_TAIL_BYTES = 64 * 1024;

  private final Path file;
  private long offset; // bytes of the file looked at so far
  private final ByteArrayOutputStream partial = new ByteArrayOutputStream(); // a line's start
  private volatile boolean stopped = false;
  private Thread follower;

  SidecarLog(Path file) {
    this.file = file;
    this.offset = size(); // what an earlier JVM with this pid wrote is not ours
  }

  /** The file's length now (0 when it does not exist yet). */
  long size() {
    try {
      return Files.exists(file) ? Files.size(file) : 0;
    } catch (IOException e) {
      return 0;
    }
  }

  /** Forward new lines from now on, every {@code intervalMs}, on a daemon thread. */
  void follow(long intervalMs) {
    follower = new Thread(() -> {
      while (!stopped) {
        forward();
        try {
          Thread.sleep(intervalMs);
        } catch (InterruptedException e) {
          return;
        }
      }
    }, "taskstate-sidecar-log");
    follower.setDaemon(true);
    follower.start();
  }

  /** Forward what was written since the last call, then stop following. */
  void stop() {
    stopped = true;
    if (follower != null) {
      follower.interrupt();
    }
    forward();
  }

  /** Forward the lines written since the last call that an operator must see. */
  synchronized void forward() {
    long end = size();
    if (end < offset) { // the file was replaced: start again at its beginning
      offset = 0;
      partial.reset();
    }
    if (end == offset) {
      return;
    }
    byte[] chunk = new byte[(int) Math.min(end - offset, 1 << 20)];
    try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "r")) {
      f.seek(offset);
      f.readFully(chunk);
    } catch (IOException e) {
      return; // looked at again on the next call
    }
    offset += chunk.length;
    int start = 0;
    for (int i = 0; i < chunk.length; i++) {
      if (chunk[i] == '\n') {
        partial.write(chunk, start, i - start);
        String line = partial.toString(StandardCharsets.UTF_8);
        partial.reset();
        start = i + 1;
        if (mustBeSeen(line)) {
          LOG.warn("taskstate sidecar ({}): {}", file, line);
        }
      }
    }
    partial.write(chunk, start, chunk.length - start);
  }

  static boolean mustBeSeen(String line) {
    String l = line.strip();
    if (l.isEmpty()) {
      return false;
    }
    if (!l.startsWith("{")) {
      return true; // not a log record: Python's own output (a traceback, an import error)
    }
    return l.contains("\"level\":\"warning\"") || l.contains("\"level\":\"error\"")
        || l.contains("\"level\":\"critical\"");
  }

  /** The last {@code maxLines} lines written since the file had {@code from} bytes. */
  String tail(long from, int maxLines) {
    long end = size();
    long begin = Math.max(from > end ? 0 : from, end - MAX_TAIL_BYTES);
    byte[] bytes = new byte[(int) (end - begin)];
    try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "r")) {
      f.seek(begin);
      f.readFully(bytes);
    } catch (IOException e) {
      return "(its log " + file + " could not be read: " + e.getMessage() + ")";
    }
    List<String> lines = new ArrayList<>();
    for (String line : new String(bytes, StandardCharsets.UTF_8).split("\n")) {
      if (!line.isBlank()) {
        lines.add(line.stripTrailing());
      }
    }
    if (lines.isEmpty()) {
      return "(its log " + file + " is empty)";
    }
    return String.join("\n", lines.subList(Math.max(0, lines.size() - maxLines), lines.size()));
  }
}
