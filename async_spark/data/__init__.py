"""async_spark.data."""
