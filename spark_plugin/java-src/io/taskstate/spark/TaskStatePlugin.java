package io.taskstate.spark;

import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * Starts and supervises one taskstate sidecar per executor.
 *
 * <p>Enable with {@code spark.plugins=io.taskstate.spark.TaskStatePlugin} and set
 * {@code spark.taskstate.redisUrl}. The sidecar listens on
 * {@code <runDir>/jvm-<executor pid>.sock}; Python workers of the executor find it by
 * walking up their process ancestry, so no per-executor setting is needed. The sidecar
 * is restarted when it dies, stopped (SIGTERM, graceful drain) when the executor shuts
 * down, and exits by itself when the executor JVM is killed ({@code --parent-pid}).
 *
 * <p>Settings: {@code spark.taskstate.redisUrl} (required; passed to the sidecar in its
 * environment, never on its command line), {@code spark.taskstate.python} (default:
 * PYSPARK_PYTHON, then spark.pyspark.python, then python3), {@code spark.taskstate.runDir}
 * (default: TASKSTATE_RUN_DIR, then /tmp/taskstate-run), {@code spark.taskstate.sidecar.extraArgs}
 * (space separated), {@code spark.taskstate.startTimeoutSeconds} (default 60).
 *
 * <p>A sidecar that exits before it reports ready fails the executor at once, with the
 * end of its log in the error (a missing module, a bad option, refused credentials); one
 * that neither exits nor reports ready within startTimeoutSeconds, then. The sidecar logs
 * to {@code <runDir>/jvm-<executor pid>.log}; its warnings and errors also go to the
 * executor's own log.
 */
public class TaskStatePlugin implements SparkPlugin {

  @Override
  public DriverPlugin driverPlugin() {
    return null;
  }

  @Override
  public ExecutorPlugin executorPlugin() {
    return new SidecarSupervisor();
  }
}
