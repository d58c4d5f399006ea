"""Shared fixtures: one SparkSession (local[4,2]) for the whole test session, on loopback."""

from __future__ import annotations

import os

import pytest

# Everything a test starts listens on loopback only.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", __import__("sys").executable)

SPARK_TEST_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
    "spark.python.worker.faulthandler.enabled": "true",
}


@pytest.fixture(scope="session")
def spark():
    """The session's SparkSession: local[4,2] (4 slots, tasks retried once)."""
    from async_spark.engine import build_session

    session = build_session("local[4,2]", app_name="async-spark-tests", conf=SPARK_TEST_CONF)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def sc(spark):
    return spark.sparkContext
