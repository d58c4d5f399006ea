"""async_spark.hylo."""
