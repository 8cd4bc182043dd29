package io.taskstate.spark;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.spark.SparkConf;
import org.apache.spark.TaskFailedReason;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** The executor side: one sidecar process, restarted when it dies. */
public final class SidecarSupervisor implements ExecutorPlugin {
  private static final Logger LOG = LoggerFactory.getLogger(SidecarSupervisor.class);

  private volatile boolean stopping = false;
  private volatile Process process;
  private Thread supervisor;
  private List<String> command;
  private String redisUrl;
  private Path socket;
  private Path logFile;
  private SidecarLog log; // forwards its warnings to the executor's log
  private String python;
  private long startTimeoutSeconds;
  private String pythonPath;
  private FlushBarrier barrier; // null: spark.taskstate.flushBarrier=false
  // the barrier's journal (sidecar/flush.py): read by a restarted sidecar, so it is removed
  // only when this executor starts and stops
  private Path journal;

  static String setting(SparkConf conf, String key, String env, String fallback) {
    if (conf.contains(key)) {
      return conf.get(key);
    }
    String fromEnv = env == null ? null : System.getenv(env);
    return fromEnv != null && !fromEnv.isEmpty() ? fromEnv : fallback;
  }

  @Override
  public void init(PluginContext ctx, Map<String, String> extraConf) {
    SparkConf conf = ctx.conf();
    redisUrl = setting(conf, "spark.taskstate.redisUrl", "TASKSTATE_REDIS_URL", null);
    if (redisUrl == null) {
      throw new IllegalArgumentException(
          "taskstate plugin: set spark.taskstate.redisUrl (for example "
              + "--conf spark.taskstate.redisUrl=redis://redis:6379/0)");
    }
    python = setting(conf, "spark.taskstate.python", "PYSPARK_PYTHON",
        conf.get("spark.pyspark.python", "python3"));
    Path runDir = Paths.get(setting(conf, "spark.taskstate.runDir", "TASKSTATE_RUN_DIR",
        "/tmp/taskstate-run"));
    startTimeoutSeconds = Long.parseLong(conf.get("spark.taskstate.startTimeoutSeconds", "60"));
    long pid = ProcessHandle.current().pid();
    socket = runDir.resolve("jvm-" + pid + ".sock");
    logFile = runDir.resolve("jvm-" + pid + ".log");
    command = new ArrayList<>();
    Collections.addAll(command, python, "-m", "taskstate.sidecar", "--listen",
        "unix://" + socket.toAbsolutePath(), "--parent-pid", Long.toString(pid));
    pythonPath = pyFilesPath(conf.get("spark.submit.pyFiles", ""));
    if (Boolean.parseBoolean(conf.get("spark.taskstate.flushBarrier", "true"))) {
      long flushTimeout = Long.parseLong(conf.get("spark.taskstate.flushTimeoutSeconds", "120"));
      Path barrierSocket = runDir.resolve("jvm-" + pid + ".barrier.sock");
      Collections.addAll(command, "--barrier", barrierSocket.toAbsolutePath().toString(),
          "--flush-timeout", Long.toString(flushTimeout));
      // the sidecar gives up on a worker after flushTimeout; the plugin waits a little more
      barrier = new FlushBarrier(barrierSocket, (flushTimeout + 30) * 1000L);
      journal = runDir.resolve("jvm-" + pid + ".barrier.journal");
    }
    String extra = conf.get("spark.taskstate.sidecar.extraArgs", "").trim();
    if (!extra.isEmpty()) {
      Collections.addAll(command, extra.split("\\s+"));
    }
    long retentionHours = Long.parseLong(conf.get("spark.taskstate.logRetentionHours", "168"));
    try {
      Files.createDirectories(runDir);
      RunDirCleaner.clean(runDir, TimeUnit.HOURS.toMillis(retentionHours),
          System.currentTimeMillis());
      if (journal != null) {
        Files.deleteIfExists(journal); // an earlier process's with this pid, never this one's
      }
      log = new SidecarLog(logFile);
      start();
    } catch (IOException | InterruptedException e) {
      if (log != null) {
        log.stop();
      }
      throw new IllegalStateException("taskstate plugin: could not start the sidecar ("
          + String.join(" ", command) + "): " + e.getMessage(), e);
    }
    log.follow(500);
    supervisor = new Thread(this::supervise, "taskstate-sidecar-supervisor");
    supervisor.setDaemon(true);
    supervisor.start();
    LOG.info("taskstate sidecar for executor {} listening on unix://{}",
        ctx.executorID(), socket);
  }

  /**
   * The --py-files of the application as local paths, so that a sidecar can run from
   * taskstate-pyfiles.zip when taskstate is not installed in the executor's Python.
   * Spark fetches them into the executor's working directory before plugins start.
   */
  static String pyFilesPath(String pyFiles) {
    List<String> out = new ArrayList<>();
    Path cwd = Paths.get(System.getProperty("user.dir"));
    for (String entry : pyFiles.split(",")) {
      String uri = entry.trim();
      if (uri.isEmpty()) {
        continue;
      }
      String path = uri.startsWith("file:") ? java.net.URI.create(uri).getPath() : uri;
      Path name = Paths.get(path).getFileName();
      if (name != null && Files.exists(cwd.resolve(name))) {
        out.add(cwd.resolve(name).toString());
      } else if (Files.exists(Paths.get(path))) {
        out.add(path);
      }
    }
    return String.join(":", out);
  }

  private void start() throws IOException, InterruptedException {
    ProcessBuilder pb = new ProcessBuilder(command);
    pb.environment().put("TASKSTATE_REDIS_URL", redisUrl);
    if (!pythonPath.isEmpty()) {
      String old = pb.environment().getOrDefault("PYTHONPATH", "");
      pb.environment().put("PYTHONPATH", old.isEmpty() ? pythonPath : pythonPath + ":" + old);
    }
    // the sidecar writes its log itself (it outlives a killed executor); `log` forwards
    // its warnings to the executor's log
    pb.redirectError(ProcessBuilder.Redirect.appendTo(logFile.toFile()));
    long logStart = log.size();
    long started = System.nanoTime();
    Process p = pb.start();
    CountDownLatch ready = new CountDownLatch(1);
    Thread reader = new Thread(() -> {
      try (BufferedReader r = new BufferedReader(
          new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
        String line;
        while ((line = r.readLine()) != null) {
          if (line.contains("ready")) {
            ready.countDown();
          }
        }
      } catch (IOException ignored) {
        // the process ended
      }
    }, "taskstate-sidecar-stdout");
    reader.setDaemon(true);
    reader.start();
    long deadline = started + TimeUnit.SECONDS.toNanos(startTimeoutSeconds);
    // the child's exit ends the wait at once (a missing module, a bad option, Redis
    // refusing the credentials): its log says why
    while (!ready.await(50, TimeUnit.MILLISECONDS)) {
      if (!p.isAlive()) {
        reader.join(1000); // its last output, a ready line included, may still be in the pipe
        if (ready.getCount() == 0) {
          break;
        }
        log.forward();
        double seconds = (System.nanoTime() - started) / 1e9;
        throw new IOException(String.format("the sidecar exited with code %d after %.1f s, "
            + "before it reported ready. %s", p.exitValue(), seconds, cause(logStart)));
      }
      if (System.nanoTime() > deadline) {
        p.destroyForcibly();
        log.forward();
        throw new IOException("the sidecar did not report ready within " + startTimeoutSeconds
            + " s (spark.taskstate.startTimeoutSeconds). " + cause(logStart));
      }
    }
    log.forward(); // its start-up warnings (a Redis without persistence, ...) now
    process = p;
  }

  /** The end of what the sidecar just wrote to its log, and the usual fix. */
  private String cause(long logStart) {
    String tail = log.tail(logStart, 12);
    String out = "The end of its log (" + logFile + "):\n" + tail;
    if (tail.contains("No module named")) {
      out += "\nThe sidecar runs in spark.taskstate.python (" + python + "): that Python "
          + "needs taskstate's dependencies (README, Install: the executors' pip install "
          + "line, or taskstate spark-package --pack-env) and taskstate itself (--py-files "
          + "taskstate-pyfiles.zip).";
    }
    return out;
  }

  private void supervise() {
    long backoffMs = 200;
    while (!stopping) {
      Process p = process;
      try {
        int code = p.waitFor();
        if (stopping) {
          return;
        }
        LOG.warn("taskstate sidecar exited with {}; restarting (log: {})", code, logFile);
        Thread.sleep(backoffMs);
        start();
        backoffMs = 200;
      } catch (InterruptedException e) {
        return;
      } catch (IOException e) {
        LOG.error("taskstate sidecar restart failed: {}", e.getMessage());
        backoffMs = Math.min(backoffMs * 2, 10_000);
      }
    }
  }

  @Override
  public void onTaskStart() {
    if (barrier != null) {
      barrier.onTaskStart();
    }
  }

  @Override
  public void onTaskSucceeded() {
    if (barrier != null) {
      barrier.onTaskSucceeded();
    }
  }

  @Override
  public void onTaskFailed(TaskFailedReason reason) {
    if (barrier != null) {
      barrier.onTaskFailed();
    }
  }

  @Override
  public void shutdown() {
    stopping = true;
    Process p = process;
    if (p != null) {
      p.destroy(); // SIGTERM: the sidecar drains in-flight commits
      try {
        if (!p.waitFor(30, TimeUnit.SECONDS)) {
          p.destroyForcibly();
        }
      } catch (InterruptedException e) {
        p.destroyForcibly();
        Thread.currentThread().interrupt();
      }
    }
    if (supervisor != null) {
      supervisor.interrupt();
    }
    if (log != null) {
      log.stop();
    }
    new File(socket.toString()).delete();
    if (journal != null) {
      new File(journal.toString()).delete();
    }
  }
}
