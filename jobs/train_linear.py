"""spark-submit entry point of the main job: the flags of ``async-spark train``.

    spark-submit --master spark://host:7077 jobs/train_linear.py --method asaga --data PATH --out DIR

The master and configuration given to spark-submit win over spark-conf/spark-defaults.conf.
"""

import sys

from async_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
