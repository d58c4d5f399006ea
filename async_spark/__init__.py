"""async_spark: asynchronous optimization, stochastic momentum and HyLo on stock PySpark.

Subpackages (imports run one way, see DESIGN):

- :mod:`async_spark.data`    datasets as partitioned blocks that live in the Python workers
- :mod:`async_spark.models`  losses and regularizers as pure numpy/scipy functions
- :mod:`async_spark.optim`   pure update rules (``init`` / ``update``)
- :mod:`async_spark.theory`  the momentum paper's results as code
- :mod:`async_spark.engine`  the ASYNC scheduler on PySpark
- :mod:`async_spark.solvers` the training loop joining rule, model and engine
- :mod:`async_spark.hylo`    HyLo natural-gradient preconditioner (PyTorch)
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
