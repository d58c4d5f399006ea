"""``python -m async_spark.cli``: the ``async-spark`` command."""

import sys

from async_spark.cli import main

sys.exit(main())
