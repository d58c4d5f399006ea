"""async_spark.gpu."""
