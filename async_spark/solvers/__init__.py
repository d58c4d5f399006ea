"""async_spark.solvers."""
