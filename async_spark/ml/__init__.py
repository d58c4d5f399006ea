"""async_spark.ml."""
