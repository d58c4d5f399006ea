"""spark-submit entry point of the main job: ASAGA beside SAGA under cloud stragglers on
builtin:synthetic, L-BFGS (``--also``) for reference, with a report (``report.md``, ``objective.png``, ``report.json``) in ``--out``.

    spark-submit --master spark://host:7077 jobs/main.py --out /shared/runs/main

``bash scripts/run-main.sh`` runs it in local mode. The master and configuration given to
spark-submit win over spark-conf/spark-defaults.conf. See async_spark/cli/main_job.py.
"""

import sys

from async_spark.cli.main_job import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], prog="jobs/main.py"))
