"""async_spark.models."""
