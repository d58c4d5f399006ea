"""async_spark.theory."""
