"""async_spark.optim."""
