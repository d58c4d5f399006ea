"""The one SparkSession builder used by jobs, notebooks and tests.

Precedence, highest first:

1. ``conf`` overrides passed here (``--conf KEY=VALUE`` on the command line);
2. what ``spark-submit`` already set (``--master``, ``--conf``, ``--properties-file``);
3. ``spark-conf/spark-defaults.conf`` of this project (or ``$ASYNC_SPARK_CONF_DIR``).

The master is never hard-coded: an explicit ``master`` argument wins, then the one spark-submit
gave, then ``spark.master`` from the defaults file, and only a plain ``python`` run with none of
these gets ``local[*]``.

``log_file``: when this call starts the JVM, the JVM's stderr goes to that file instead of the
terminal — Spark's log4j lines, the JVM's own start-up warnings and, in local mode, what the
Python workers and their daemon print (e.g. a ``BrokenPipeError`` when a worker's socket is closed
at the end of a job). A successful run stays quiet and the log is kept for debugging; errors still
reach the caller as exceptions.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "ENV_CHECK_MODULES",
    "ENV_CHECK_TIMEOUT_CONF",
    "ExecutorEnvironmentError",
    "JavaNotFoundError",
    "build_session",
    "check_executors",
    "check_java",
    "default_conf_dir",
    "parse_conf_pairs",
    "read_defaults",
]


class JavaNotFoundError(RuntimeError):
    """No usable Java runtime for Spark."""


class ExecutorEnvironmentError(RuntimeError):
    """The executors' Python cannot run async_spark's tasks (the message says the fix)."""


def default_conf_dir() -> Path | None:
    """``$ASYNC_SPARK_CONF_DIR``, else ``spark-conf/`` of a source checkout, else None."""
    env = os.environ.get("ASYNC_SPARK_CONF_DIR")
    if env:
        return Path(env).resolve()
    candidate = Path(__file__).resolve().parents[2] / "spark-conf"
    return candidate if (candidate / "spark-defaults.conf").is_file() else None


def read_defaults(conf_dir: Path | None) -> dict[str, str]:
    """Parse ``spark-defaults.conf`` (``key value`` or ``key=value`` lines, ``#`` comments)."""
    if conf_dir is None:
        return {}
    path = Path(conf_dir) / "spark-defaults.conf"
    if not path.is_file():
        return {}
    out: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" in line.split()[0]:
            key, _, value = line.partition("=")
        else:
            parts = line.split(None, 1)
            if len(parts) != 2:
                raise ValueError(f"{path}:{lineno}: expected 'key value', got {raw!r}")
            key, value = parts
        out[key.strip()] = value.strip().replace("{conf_dir}", str(Path(conf_dir).resolve()))
    return out


def parse_conf_pairs(pairs: Iterable[str] | Mapping[str, Any] | None) -> dict[str, str]:
    """``["k=v", ...]`` or a mapping -> dict; a malformed pair raises naming it."""
    if pairs is None:
        return {}
    if isinstance(pairs, Mapping):
        return {str(k): str(v) for k, v in pairs.items()}
    out = {}
    for pair in pairs:
        key, sep, value = str(pair).partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def check_java() -> str:
    """Return the Java version line, or raise :class:`JavaNotFoundError` with what to do."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise JavaNotFoundError(
            "Spark needs a Java runtime (Java 17 or 21) and none was found: install one "
            "(e.g. 'apt-get install openjdk-17-jre-headless') or set JAVA_HOME"
        )
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaNotFoundError(f"could not run {java} -version: {exc}") from None
    text = (proc.stderr or proc.stdout).strip().splitlines()
    if proc.returncode != 0 or not text:
        raise JavaNotFoundError(f"{java} -version failed: {' '.join(text)}")
    return text[0]


def _no_active_context() -> bool:
    from pyspark import SparkContext

    return SparkContext._active_spark_context is None


def _jvm_running() -> bool:
    from pyspark import SparkContext

    return SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(
    master: str | None = None,
    app_name: str = "async-spark",
    conf: Iterable[str] | Mapping[str, Any] | None = None,
    conf_dir: str | os.PathLike[str] | None = None,
    log_level: str | None = "WARN",
    log_file: str | os.PathLike[str] | None = None,
) -> Any:
    """Build (or get) the SparkSession.

    Parameters
    ----------
    master : str, optional
        Spark master URL. When None, spark-submit's master (or the defaults file's) is kept.
    app_name : str
    conf : list of "KEY=VALUE" or mapping, optional
        Overrides, highest precedence.
    conf_dir : path, optional
        Folder with ``spark-defaults.conf`` (default: :func:`default_conf_dir`).
    log_level : str or None
        ``sc.setLogLevel`` after start (None leaves it).
    log_file : path, optional
        Where the JVM's stderr goes when this call starts the JVM (appended; parent folders are
        created). Ignored when a JVM is already running (spark-submit, a notebook's session).
    """
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    overrides = parse_conf_pairs(conf)
    if not _jvm_running():
        check_java()
    cdir = Path(conf_dir) if conf_dir is not None else default_conf_dir()
    defaults = read_defaults(cdir)

    submitted: dict[str, str] = {}
    if _jvm_running():
        from pyspark import SparkContext

        # Under spark-submit the JVM exists before Python starts; connect to it so that SparkConf
        # sees what spark-submit set (as JVM system properties).
        SparkContext._ensure_initialized()
        submitted = dict(SparkConf().getAll())

    effective_master = master or overrides.get("spark.master") or submitted.get("spark.master")
    effective_master = effective_master or defaults.get("spark.master") or "local[*]"
    python = overrides.get("spark.pyspark.python") or defaults.get("spark.pyspark.python")
    if python and "spark.pyspark.python" not in submitted and _no_active_context():
        # spark-submit turns spark.pyspark.python into the executors' interpreter
        # (PYSPARK_PYTHON); a plain `python` driver reads only the variable, so set it.
        os.environ["PYSPARK_PYTHON"] = python
    if effective_master.startswith("local"):
        # Local executors run on this machine: give them this interpreter (and its packages)
        # rather than whatever `python3` is first on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    builder = SparkSession.builder.appName(app_name)
    for key, value in defaults.items():
        if key not in submitted and key not in overrides:
            builder = builder.config(key, value)
    for key, value in overrides.items():
        builder = builder.config(key, value)
    if master is not None:
        builder = builder.master(master)
    elif "spark.master" not in submitted and "spark.master" not in overrides:
        if "spark.master" not in defaults:
            builder = builder.master("local[*]")
    if log_file is not None and not _jvm_running():
        _launch_jvm_logging_to(builder, Path(log_file))
    spark = builder.getOrCreate()
    if log_level:
        spark.sparkContext.setLogLevel(log_level)
    return spark


def _launch_jvm_logging_to(builder: Any, path: Path) -> None:
    """Start the JVM gateway with the builder's configuration and its stderr in ``path``.

    ``SparkSession.builder.getOrCreate`` launches the gateway with the same configuration
    (``pyspark.java_gateway.launch_gateway``); launching it first, with ``stderr`` redirected,
    changes nothing else: ``getOrCreate`` finds the gateway running and uses it.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf(loadDefaults=False)
    for key, value in builder._options.items():
        conf.set(key, value)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as fh:  # the JVM keeps its own copy of the descriptor
        gateway = launch_gateway(conf, popen_kwargs={"stderr": fh})
    SparkContext._ensure_initialized(gateway=gateway)


# What a task needs on an executor: the project and its compiled dependencies (pyarrow for the
# resident transport's mapInArrow job, pandas for Arrow batches).
ENV_CHECK_MODULES = ("async_spark", "numpy", "scipy", "pyarrow", "pandas")

# The probe runs on an executor whatever is installed there, so it must not be unpickled by
# reference to async_spark: it is compiled here into a namespace that is no importable module,
# which makes cloudpickle ship it by value. It never raises (a failed import is an answer).
_PROBE_SOURCE = """
def probe(_rows):
    import importlib
    import sys
    found = {}
    for name in MODULES:
        try:
            found[name] = str(getattr(importlib.import_module(name), "__version__", "?"))
        except BaseException as exc:
            found[name] = None
            found[name + ":error"] = type(exc).__name__ + ": " + str(exc)
    host = "?"
    try:
        import socket
        host = socket.gethostname()
    except Exception:
        pass
    return [{"python": "%d.%d.%d" % sys.version_info[:3], "executable": sys.executable,
             "host": host, "modules": found}]

def probe_arrow(batches):
    import json
    import pyarrow as pa
    for _ in batches:
        pass
    answer = json.dumps(probe(None)[0])
    yield pa.RecordBatch.from_pydict({"answer": [answer]})
"""

FIX_HINT = (
    "give the executors a Python with this environment: --conf spark.pyspark.python=PATH (an "
    "interpreter with async_spark installed, at the same path on every node), or ship one: "
    "bash scripts/pack-env.sh, then --archives env.tar.gz#env --conf "
    "spark.pyspark.python=./env/bin/python (spark-submit; async-spark takes --conf "
    "spark.archives=env.tar.gz#env) - see docs/clusters.md"
)


def _probe_function(modules: tuple[str, ...], name: str = "probe") -> Any:
    namespace: dict[str, Any] = {"__name__": "_async_spark_executor_probe", "MODULES": modules}
    exec(compile(_PROBE_SOURCE, "<async_spark executor probe>", "exec"), namespace)
    return namespace[name]


def _driver_versions(modules: tuple[str, ...]) -> dict[str, str | None]:
    import importlib

    out: dict[str, str | None] = {}
    for name in modules:
        try:
            out[name] = str(getattr(importlib.import_module(name), "__version__", "?"))
        except ImportError:
            out[name] = None
    return out


def _public(version: str | None) -> str | None:
    """A version without its local part: ``2.13.0+cpu`` and ``2.13.0+cu121`` are one release
    (torch's builds for a driver without a GPU and executors with one)."""
    return None if version is None else version.split("+", 1)[0]


def _executors_are_the_driver(sc: Any) -> bool:
    """Local mode with this interpreter: the executors' Python is the driver's."""
    master = str(sc.master)
    if not master.startswith("local") or master.startswith("local-cluster"):
        return False
    python = sc.getConf().get("spark.pyspark.python", None) or sc.pythonExec
    resolved = shutil.which(python) or python
    return os.path.realpath(resolved) == os.path.realpath(sys.executable)


# Sessions already checked: (application or Connect session id, modules, force) -> the answer.
# A fit, a CrossValidator's many fits or a notebook's repeated runs pay the probe once per session.
_CHECKED: dict[tuple[str, tuple[str, ...], bool], dict[str, Any] | None] = {}
_CHECK_LOCK = threading.Lock()  # guards _CHECK_LOCKS
_CHECK_LOCKS: dict[tuple[str, tuple[str, ...], bool], threading.Lock] = {}


def _session_key(spark: Any) -> str:
    """What identifies the executors a session runs on: the application id of its SparkContext
    (a new context is a new application), or a Spark Connect session's id."""
    from .connect import is_connect

    if is_connect(spark):
        return "connect:" + str(getattr(spark, "session_id", id(spark)))
    return "app:" + str(spark.sparkContext.applicationId)


def check_executors(
    spark: Any,
    modules: tuple[str, ...] = ENV_CHECK_MODULES,
    *,
    force: bool = False,
    cache: bool = True,
) -> dict[str, Any] | None:
    """Check, with one tiny task, that an executor imports ``modules`` at the driver's versions.

    Run before training: an executor whose Python lacks the project otherwise fails every task
    after Spark's retries, with ``No module named 'async_spark'`` and no hint. Here the probe task
    itself never fails on an import (it reports it), so the answer comes in about the time a
    Python worker takes to start. A session that passed is not probed again (``cache``): the
    Estimators and ``async-spark`` call this before every fit, and a ``CrossValidator`` fits many
    times on one session.

    Parameters
    ----------
    spark : SparkSession
    modules : names
        Imported on the executor and compared with the driver's ``__version__`` (the public
        version: a local part such as torch's ``+cpu`` or ``+cu121`` is not compared).
    force : bool
        Check even in local mode with the driver's own interpreter (skipped otherwise: the
        executors are this Python).
    cache : bool
        Return the answer of an earlier check of the same session (SparkContext application or
        Spark Connect session) and modules that passed, without a task. A failed check is not
        cached.

    Returns
    -------
    dict or None
        What the executor answered (``python``, ``executable``, ``host``, ``modules``); None
        when skipped.

    Raises
    ------
    ExecutorEnvironmentError
        One line: what the executor lacks or has at another version, and the fix
        (``spark.pyspark.python`` or a packed environment with ``--archives``); or that no
        answer came within ``spark.async_spark.envCheckTimeout`` seconds (default 300), the
        probe's job cancelled.
    ValueError
        ``spark.async_spark.envCheckTimeout`` set to something else than seconds > 0.
    """
    key = (_session_key(spark), tuple(modules), bool(force))
    with _CHECK_LOCK:
        lock = _CHECK_LOCKS.setdefault(key, threading.Lock())
    with lock:  # concurrent fits of one session (a CrossValidator's pool) wait for one probe
        if cache and key in _CHECKED:
            answer = _CHECKED[key]
            return None if answer is None else dict(answer)
        answer = _check_executors(spark, tuple(modules), force)
        _CHECKED[key] = answer
        return None if answer is None else dict(answer)


#: Session conf (or environment variable ``SPARK_ASYNC_SPARK_ENVCHECKTIMEOUT``): seconds the
#: executor check waits for its one task's answer before it cancels it and fails.
ENV_CHECK_TIMEOUT_CONF = "spark.async_spark.envCheckTimeout"
_ENV_CHECK_SECONDS = 300.0  # a cluster that starts its executors on demand takes minutes


class _ProbeTimedOut(Exception):
    pass


def _check_seconds(spark: Any) -> float:
    from .connect import conf_value

    text = conf_value(spark, ENV_CHECK_TIMEOUT_CONF)
    if text is None:
        return _ENV_CHECK_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise ValueError(f"{ENV_CHECK_TIMEOUT_CONF} must be a number of seconds > 0, got {text!r}")
    return seconds


def _timed_out_error(seconds: float, where: str) -> ExecutorEnvironmentError:
    return ExecutorEnvironmentError(
        f"{where} did not answer the environment check within {seconds:g} s (no free task slot, "
        f"or a Python worker that does not start or hangs); the check's job was cancelled. "
        f"A cluster that takes longer to start its executors: raise --conf "
        f"{ENV_CHECK_TIMEOUT_CONF}=SECONDS"
    )


def _check_executors(spark: Any, modules: tuple[str, ...], force: bool) -> dict[str, Any] | None:
    from .connect import is_connect

    seconds = _check_seconds(spark)
    answer: dict[str, Any] | None
    if is_connect(spark):  # no SparkContext: the probe is a one-row mapInArrow job
        try:
            answer = _connect_probe(spark, modules, seconds)
        except _ProbeTimedOut:
            raise _timed_out_error(seconds, "the Spark Connect server's executors") from None
        except Exception as exc:
            reason = _first_line_of_java_error(exc)
            raise ExecutorEnvironmentError(
                f"the Spark Connect server's executors could not run a Python task ({reason}); "
                + FIX_HINT
            ) from None
    else:
        try:
            answer = _classic_probe(spark.sparkContext, modules, force, seconds)
        except _ProbeTimedOut:
            raise _timed_out_error(seconds, "the executors") from None
    if answer is None:
        return None
    driver = _driver_versions(tuple(modules))
    found = answer["modules"]
    where = f"the executors' Python ({answer['executable']}, Python {answer['python']} on {answer['host']})"
    missing = [m for m in modules if found.get(m) is None]
    if missing:
        first = found.get(missing[0] + ":error", "")
        raise ExecutorEnvironmentError(
            f"{where} cannot import {', '.join(missing)} ({first}); " + FIX_HINT
        )
    mismatched = [
        f"{m} {found[m]} (driver: {driver[m]})"
        for m in modules
        if driver.get(m) is not None and _public(found[m]) != _public(driver[m])
    ]
    if mismatched:
        raise ExecutorEnvironmentError(
            f"{where} has other versions than the driver: {', '.join(mismatched)}; " + FIX_HINT
        )
    return dict(answer)


def _connect_probe(spark: Any, modules: tuple[str, ...], seconds: float) -> dict[str, Any]:
    """The probe as a one-row ``mapInArrow`` job under a tag of its own, interrupted after
    ``seconds`` (raises :class:`_ProbeTimedOut` then)."""
    import json

    probe = _probe_function(tuple(modules), "probe_arrow")
    tag = f"async-spark-env-check-{uuid.uuid4().hex[:12]}"
    done = threading.Event()
    timed_out: list[bool] = []

    def watch() -> None:
        if done.wait(seconds):
            return
        timed_out.append(True)
        while True:  # again each second: an interrupt that came before the job did nothing
            try:
                spark.interruptTag(tag)
            except Exception:  # the session is gone: its job with it
                log.debug("executor check: could not interrupt %s", tag, exc_info=True)
            if done.wait(1.0):
                return

    watcher = threading.Thread(target=watch, name="async-spark-env-check", daemon=True)
    rows = None
    try:
        spark.addTag(tag)  # the tags of the operations this thread starts
        watcher.start()
        rows = spark.range(1, numPartitions=1).mapInArrow(probe, "answer string").collect()
    except Exception:
        if timed_out:
            raise _ProbeTimedOut() from None
        raise
    finally:
        done.set()
        if watcher.is_alive():
            watcher.join()
        try:
            spark.removeTag(tag)
        except Exception:  # a closed session: nothing left to untag, and its error goes on
            log.debug("executor check: could not remove %s", tag, exc_info=True)
    return dict(json.loads(rows[0]["answer"]))  # an answer is kept, even one at the deadline


def _classic_probe(
    sc: Any, modules: tuple[str, ...], force: bool, seconds: float
) -> dict[str, Any] | None:
    """Run the probe as one task that fails the check at its first failure.

    A task that cannot start a Python worker (no such interpreter, another Python version, a
    crash at start-up) would be retried ``spark.task.maxFailures`` times (4 on a cluster, fixed
    when the SparkContext starts), each retry starting a worker again. The probe's job runs in a
    job group of its own; a watcher thread polls the status tracker and cancels the group at the
    first failed task, and the check reports that task's error; or after ``seconds`` without an
    answer (raises :class:`_ProbeTimedOut` then).
    """
    if not force and _executors_are_the_driver(sc):
        return None
    probe = _probe_function(tuple(modules))
    group = f"async-spark-env-check-{uuid.uuid4().hex[:12]}"
    saved = {k: sc.getLocalProperty(k) for k in _JOB_GROUP_PROPERTIES}
    first_failure: list[str] = []
    timed_out: list[bool] = []
    done = threading.Event()
    deadline = time.monotonic() + seconds

    def watch() -> None:
        try:
            cancelled_at = -math.inf
            while not done.wait(_WATCH_SECONDS):
                reason = _first_task_failure(sc, group)
                now = time.monotonic()
                if reason is None and now >= deadline:
                    timed_out.append(True)
                    if now - cancelled_at >= 1.0:  # again each second until the job is gone
                        sc.cancelJobGroup(group)
                        cancelled_at = now
                    continue
                if reason is not None:
                    first_failure.append(reason)
                    sc.cancelJobGroup(group)
                    return
        except Exception:  # the context stopped under it: the job fails or ends by itself
            log.debug("executor check: the watcher stopped", exc_info=True)

    watcher = threading.Thread(target=watch, name="async-spark-env-check", daemon=True)

    def stop_watching() -> None:
        done.set()
        if watcher.is_alive():
            watcher.join()

    try:
        sc.setJobGroup(group, "async-spark: check the executors' Python environment", True)
        watcher.start()
        return dict(sc.parallelize([0], 1).mapPartitions(probe).collect()[0])
    except Exception as exc:  # the worker could not start at all (no such interpreter, ...)
        stop_watching()
        if timed_out and not first_failure:
            raise _ProbeTimedOut() from None
        reason = first_failure[0] if first_failure else _first_line_of_java_error(exc)
        python = sc.getConf().get("spark.pyspark.python", None) or sc.pythonExec
        raise ExecutorEnvironmentError(
            f"the executors could not run a Python task with {python!r} ({reason}); " + FIX_HINT
        ) from None
    finally:
        stop_watching()
        for key, value in saved.items():  # the caller's job group, description, interrupt flag
            sc.setLocalProperty(key, value)


_JOB_GROUP_PROPERTIES = (
    "spark.jobGroup.id",
    "spark.job.description",
    "spark.job.interruptOnCancel",
)
_WATCH_SECONDS = 0.05
# What a task's error says when its Python worker could not start or died (not a lost executor)
_PYTHON_WORKER_FAILURES = (
    "PythonWorkerFactory",  # the frame of every failure to start a worker (no daemon, ...)
    "pyspark.daemon",
    "Cannot run program",
    "PYTHON_VERSION_MISMATCH",
    "Python in worker",
    "Python worker exited unexpectedly",
    "Python worker failed to connect back",
    "PythonException",
)
_JAVA_CLASS_PREFIX = re.compile(r"^(?:[\w$]+\.)+[\w$]*(?:Exception|Error): ")


def _first_task_failure(sc: Any, group: str) -> str | None:
    """The error of the first task of ``group``'s jobs that failed to run Python, None while
    none did.

    The count comes from the status tracker; the text from the application's status store (the
    data behind the UI's task table). Only a Python worker that could not start or died ends the
    probe early: any other failure (a lost executor, a pre-empted node) is left to Spark's
    retries, as is a failure whose text cannot be read."""
    tracker = sc.statusTracker()
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            if stage is None or stage.numFailedTasks <= 0:
                continue
            try:
                tasks = sc._jsc.sc().statusStore().taskList(stage_id, stage.currentAttemptId, 8)
                for i in range(tasks.size()):
                    error = tasks.apply(i).errorMessage()
                    text = str(error.get()) if error.isDefined() else ""
                    if python_worker_failed(text):
                        line = _first_line_of_java_error(Exception(text))
                        return _JAVA_CLASS_PREFIX.sub("", line)
            except Exception:  # a private API of Spark's: leave the failure to Spark's retries
                pass
    return None


def python_worker_failed(error: str) -> bool:
    """Whether a task's error says its Python worker could not start or died (the probe's
    question), rather than that its executor was lost or the task was killed."""
    return any(marker in error for marker in _PYTHON_WORKER_FAILURES)


def _first_line_of_java_error(exc: BaseException) -> str:
    """The most telling line of a failed job's error (Spark's own text is pages long)."""
    text = str(exc)
    for marker in ("Cannot run program", "PYTHON_VERSION_MISMATCH", "Python in worker"):
        i = text.find(marker)
        if i >= 0:
            return " ".join(text[i : i + 240].split("\n")[0].split())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " ".join((lines[0] if lines else type(exc).__name__).split())[:240]
