"""The one SparkSession builder used by jobs, notebooks and tests.

Precedence, highest first:

1. ``conf`` overrides passed here (``--conf KEY=VALUE`` on the command line);
2. what ``spark-submit`` already set (``--master``, ``--conf``, ``--properties-file``);
3. ``spark-conf/spark-defaults.conf`` of this project (or ``$ASYNC_SPARK_CONF_DIR``).

The master is never hard-coded: an explicit ``master`` argument wins, then the one spark-submit
gave, then ``spark.master`` from the defaults file, and only a plain ``python`` run with none of
these gets ``local[*]``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "JavaNotFoundError",
    "build_session",
    "check_java",
    "default_conf_dir",
    "parse_conf_pairs",
    "read_defaults",
]


class JavaNotFoundError(RuntimeError):
    """No usable Java runtime for Spark."""


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


def _jvm_running() -> bool:
    from pyspark import SparkContext

    return SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(
    master: str | None = None,
    app_name: str = "async-spark",
    conf: Iterable[str] | Mapping[str, Any] | None = None,
    conf_dir: str | os.PathLike[str] | None = None,
    log_level: str | None = "WARN",
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
    spark = builder.getOrCreate()
    if log_level:
        spark.sparkContext.setLogLevel(log_level)
    return spark
