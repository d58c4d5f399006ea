"""async_spark.engine."""
