package io.taskstate.spark;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Removes what executors that ended left in the run directory: their sockets and journals
 * at once, and their sidecar logs once older than the retention (they are kept for a post-mortem).
 * A file of a process that is still alive (or whose pid was reused) is never touched.
 */
final class RunDirCleaner {
  private static final Logger LOG = LoggerFactory.getLogger(RunDirCleaner.class);
  // every file a sidecar of executor <pid> leaves: its sockets (gRPC, frame lane, barrier),
  // the barrier's journal and its log
  private static final Pattern NAME = Pattern.compile("jvm-(\\d+)\\.(.+)");

  private RunDirCleaner() {}

  /** Returns how many files were removed; errors are logged, never thrown. */
  static int clean(Path runDir, long retentionMillis, long now) {
    int removed = 0;
    try (DirectoryStream<Path> files = Files.newDirectoryStream(runDir, "jvm-*")) {
      for (Path f : files) {
        Matcher m = NAME.matcher(f.getFileName().toString());
        if (!m.matches() || Files.isDirectory(f)
            || ProcessHandle.of(Long.parseLong(m.group(1))).isPresent()) {
          continue;
        }
        boolean log = m.group(2).startsWith("log");
        if (log && now - Files.getLastModifiedTime(f).toMillis() < retentionMillis) {
          continue;
        }
        if (Files.deleteIfExists(f)) {
          removed++;
        }
      }
    } catch (IOException | RuntimeException e) {
      LOG.warn("taskstate plugin: could not clean {}: {}", runDir, e.toString());
    }
    if (removed > 0) {
      LOG.info("taskstate plugin: removed {} file(s) of ended executors from {}", removed, runDir);
    }
    return removed;
  }
}
