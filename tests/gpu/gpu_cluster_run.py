"""The barrier launcher on a multi-process cluster (local-cluster[2,1,1024]: two executor JVMs,
CPU, gloo), started by test_barrier_cluster.py in its own process. Prints one RESULT-JSON line.

Usage: python gpu_cluster_run.py MASTER OUT_DIR [--compare]

1. a 2-rank HyLo training through the barrier stage (weights saved to OUT_DIR/barrier.npz);
2. a rank that raises: time until RankFailedError, its message, the PIDs of the ranks' workers
   (OUT_DIR/pids.txt, one line per attempt) for the stray-process check;
3. a rank that never reaches the collective: the other rank's collective times out (3 s) and
   the stage fails -- no hang;
with --compare, also the TorchDistributor launcher on the same training and failure, and the
largest absolute difference between the two launchers' trained weights (``model.pt`` of each
run, every tensor of the state_dict), printed as ``COMPARE max_abs_weight_difference <x>`` and in
the JSON as ``compare_weights``.
"""

from __future__ import annotations

import json
import os
import sys
import time

from async_spark.engine import build_session
from async_spark.gpu import BarrierLauncher, RankFailedError, shard_rdd, train_hylo_spark
from async_spark.gpu.data import ShardSource

CONFIG = {
    "model": "cnn1d",
    "data": "synthetic",
    "optimizer": "hylo",
    "epochs": 2,
    "batch_size": 32,
    "n_train": 256,
    "n_test": 64,
    "inv_update_steps": 2,
    "workers": 2,
    "timeout": 60.0,
    "seed": 3,
}


def raising(ctx, shard, pid_file):
    import torch
    import torch.distributed as dist

    with open(pid_file, "a") as f:
        f.write(f"{ctx.rank} {os.getpid()}\n")
    if ctx.rank == 1:
        raise ValueError("rank one exploded on purpose")
    t = torch.ones(1)
    dist.all_reduce(t)  # would wait forever for rank 1 without the stage failing
    return {"never": True}


def silent(ctx, shard):
    import torch
    import torch.distributed as dist

    if ctx.rank == 1:
        time.sleep(3600)  # never joins the collective
    dist.all_reduce(torch.ones(1))
    return None


def failing_torchdist(params, source, submitted_at):
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise ValueError("rank one exploded on purpose")
    import torch

    dist.all_reduce(torch.ones(1))
    return None


def max_weight_difference(path_a: str, path_b: str) -> dict:
    """Largest |a - b| over every tensor of two saved state_dicts (``model.pt``)."""
    import torch

    a = torch.load(os.path.join(path_a, "model.pt"), map_location="cpu")
    b = torch.load(os.path.join(path_b, "model.pt"), map_location="cpu")
    if sorted(a) != sorted(b):
        return {"max_abs_diff": float("inf"), "tensors": len(a), "same_keys": False}
    diffs = {
        k: float((a[k].double() - b[k].double()).abs().max()) if a[k].numel() else 0.0 for k in a
    }
    return {
        "max_abs_diff": max(diffs.values(), default=0.0),
        "tensors": len(a),
        "parameters": int(sum(t.numel() for t in a.values())),
        "same_keys": True,
    }


def main(master: str, out_dir: str, compare: bool) -> None:
    spark = build_session(
        master,
        app_name="async-spark-gpu-cluster-test",
        conf={
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": "512m",
            "spark.barrier.sync.timeout": "60s",
            "spark.stage.maxConsecutiveAttempts": "2",
            "spark.python.task.killTimeout": "2s",
        },
    )
    out: dict = {}
    try:
        sc = spark.sparkContext
        t = time.perf_counter()
        summary = train_hylo_spark(dict(CONFIG, out=os.path.join(out_dir, "run")), spark)
        out["barrier"] = {
            "seconds": time.perf_counter() - t,
            "startup_seconds": summary["startup_seconds"],
            "stage_seconds": summary["stage_seconds"],
            "train_seconds": summary["wall_seconds"],
            "ranks_logged": sorted(summary["rank_logs"]),
            "log_sample": summary["rank_logs"]["1"][:2],
            "files": sorted(os.listdir(os.path.join(out_dir, "run"))),
        }
        src = ShardSource("builtin", "synthetic", "cnn1d", n_train=64, n_test=8)
        pid_file = os.path.join(out_dir, "pids.txt")
        launcher = BarrierLauncher(spark, 2, timeout=30.0)
        t = time.perf_counter()
        try:
            launcher.run(raising, shard_rdd(sc, src, 2), (pid_file,))
            out["raise"] = {"error": None}
        except RankFailedError as exc:
            out["raise"] = {"error": str(exc), "rank": exc.rank, "logs": exc.logs}
        out["raise"]["seconds"] = time.perf_counter() - t
        t = time.perf_counter()
        try:
            BarrierLauncher(spark, 2, timeout=3.0, retry=False).run(silent, shard_rdd(sc, src, 2))
            out["silent"] = {"error": None}
        except (RankFailedError, TimeoutError) as exc:
            out["silent"] = {"error": str(exc), "type": type(exc).__name__}
        out["silent"]["seconds"] = time.perf_counter() - t
        if compare:  # alternate launchers twice: the first stage also pays for cold workers
            from pyspark.ml.torch.distributor import TorchDistributor

            for i in range(2):
                for name in ("barrier", "torchdistributor"):
                    t = time.perf_counter()
                    summary = train_hylo_spark(
                        dict(CONFIG, out=os.path.join(out_dir, f"{name}{i}")),
                        spark,
                        launcher=name,
                    )
                    out[f"compare_{name}_{i}"] = {
                        "seconds": time.perf_counter() - t,
                        "startup_seconds": summary["startup_seconds"],
                        "stage_seconds": summary["stage_seconds"],
                        "train_seconds": summary["wall_seconds"],
                        "test_accuracy": summary["test_accuracy"],
                    }
            out["compare_weights"] = {
                f"run{i}": max_weight_difference(
                    os.path.join(out_dir, f"barrier{i}"),
                    os.path.join(out_dir, f"torchdistributor{i}"),
                )
                for i in range(2)
            }
            worst = max(v["max_abs_diff"] for v in out["compare_weights"].values())
            out["compare_weights"]["max_abs_diff"] = worst
            print(f"COMPARE max_abs_weight_difference {worst!r}")
            t = time.perf_counter()
            try:
                TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(
                    failing_torchdist, {}, {}, 0.0
                )
                out["torchdistributor_raise"] = {"error": None}
            except Exception as exc:
                text = str(exc)
                out["torchdistributor_raise"] = {
                    "type": type(exc).__name__,
                    "error_head": text[:400],
                    "chars": len(text),
                    "has_message": "rank one exploded on purpose" in text,
                }
            out["torchdistributor_raise"]["seconds"] = time.perf_counter() - t
    finally:
        spark.stop()
    print("RESULT-JSON " + json.dumps(out, default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--compare" in sys.argv[3:])
