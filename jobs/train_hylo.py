"""spark-submit entry point of the HyLo training on a Spark barrier stage (the flags of
``async-spark hylo``, plus ``--launcher``, ``--gpus-per-task``, ``--train-parquet``...).

    spark-submit --master spark://host:7077 \\
        --conf spark.executor.resource.gpu.amount=1 \\
        --conf spark.executor.resource.gpu.discoveryScript=spark-conf/gpu/getGpusResources.sh \\
        jobs/train_hylo.py --device cuda --workers 4 --model resnet32 --data synthetic --out DIR

Writes ``summary.json``, ``metrics.jsonl`` and ``model.pt`` into ``--out`` (on the driver).
The master and configuration given to spark-submit win over spark-conf/spark-defaults.conf.
"""

import sys


def main(argv: list[str] | None = None) -> int:
    from async_spark.cli.hylo import run_spark_hylo, spark_hylo_parser

    args = spark_hylo_parser("train_hylo.py", __doc__).parse_args(argv)
    args.spark = True
    try:
        return run_spark_hylo(args)
    except Exception as exc:
        if args.debug:
            raise
        usage = isinstance(exc, ValueError | OSError | ImportError)
        message = " ".join(str(exc).split()) or type(exc).__name__
        kind = "error" if usage else f"failed ({type(exc).__name__})"
        print(f"train_hylo.py: {kind}: {message}", file=sys.stderr)
        return 2 if usage else 1


if __name__ == "__main__":
    sys.exit(main())
