"""The second launcher: ``pyspark.ml.torch.distributor.TorchDistributor``.

``TorchDistributor(num_processes=W, local_mode=False, use_gpu=...)`` starts a barrier stage of W
tasks (``mapInArrow(barrier=True)``); each task picks ``MASTER_ADDR``/``MASTER_PORT`` through
``allGather`` and runs ``torchrun`` as a child process that unpickles and calls the function.
Differences from :class:`~.launcher.BarrierLauncher` that matter here:

* data path: the torchrun child cannot iterate a Spark partition, so every process reads its
  shard itself (:func:`~.data.load_shard`: generated, or a row range of the Parquet files);
  ``TorchDistributor._train_on_dataframe`` (private) would spill each partition to a local Arrow
  file first;
* startup: one more process (torchrun) and its own c10d rendezvous per task;
* GPUs: from ``spark.task.resource.gpu.amount`` (a whole number), not a stage-level profile;
* failures: pyspark's torchrun wrapper exits 0 whatever torchrun returns, so a raising rank only
  shows as "TorchDistributor failed during training. View stdout logs" (no output file). So each
  rank catches its own error instead: it writes the one-line error to the rendezvous store and
  returns; rank 0 returns its error, or the first other rank's found in the store (a rank 0 that
  waited in a collective for a dead rank times out first), and :func:`run_torchdistributor`
  raises :class:`RankFailedError` naming that rank and error; no timeout of its own (we add a
  driver-side one);
* only rank 0's return value comes back (cloudpickle), logs are streamed to the driver's stdout;
* binding: torchrun's rendezvous store on the first task's host listens on every interface of
  that host (torch's ``TCPStore`` server takes no bind address and torchrun no listening socket),
  where the barrier launcher binds its store to the task's own address; so this launcher says so
  (:func:`rendezvous_notice`) and docs/security.md advises the barrier launcher on shared networks.
"""

from __future__ import annotations

import logging
import os
import re
import time
import uuid
from datetime import timedelta
from typing import Any

from .data import ShardSource, load_shard
from .launcher import RankContext, RankFailedError

__all__ = ["rendezvous_notice", "run_torchdistributor"]

log = logging.getLogger(__name__)


def rendezvous_notice(master: str) -> tuple[int, str]:
    """The log level and line that say where torchrun's store listens: a warning on a cluster
    (every interface of the first task's host), information only in local mode (one host)."""
    text = (
        "TorchDistributor: torchrun's rendezvous store listens on every network interface of "
        "the first task's host, unauthenticated; on a shared network use the barrier launcher "
        "(--launcher barrier, the default), whose store binds to the task's own address"
    )
    level = logging.INFO if master.startswith("local") else logging.WARNING
    return level, text


def _torchdist_main(
    params: dict[str, Any], source: dict[str, Any], submitted_at: float
) -> dict[str, Any]:
    """Runs in each torchrun child: init the group from torchrun's env, read the shard, train."""
    import torch
    import torch.distributed as dist

    from .rank import hylo_rank

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = params["device"] == "cuda"
    backend = "nccl" if cuda else "gloo"
    device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if cuda else "cpu"
    ctx = RankContext(rank, world, device, backend)
    ready_at = time.time()
    initialized = False
    try:
        if cuda:
            torch.cuda.set_device(torch.device(device))
        dist.init_process_group(backend, timeout=timedelta(seconds=float(params["timeout"])))
        initialized = True
        ready_at = time.time()
        t = time.perf_counter()
        shard = load_shard(ShardSource(**source), rank, world)
        ctx.log(f"read {shard[0].shape[0]} rows (own shard) in {time.perf_counter() - t:.3f}s")
        result = hylo_rank(ctx, shard, params, source)
    except Exception as exc:  # reported through the store and rank 0's output (see above)
        message = " ".join(f"{type(exc).__name__}: {exc}".split())[:2000]
        result = {"rank_error": _share_error(rank, world, message, initialized)}
    finally:
        if initialized:
            dist.destroy_process_group()
    if rank == 0:
        result["timings"] = {"submitted_at": submitted_at, "ready_at": ready_at}
        result["logs"] = ctx.logs
    return result


_ERROR_KEY = "async_spark_rank_error_"


def _share_error(rank: int, world: int, message: str, initialized: bool) -> dict[str, Any]:
    """Publish this rank's error; on rank 0 pick the error to report: another rank's first (this
    rank's own may only be the timeout of waiting for it), else its own."""
    if not initialized:
        return {"rank": rank, "error": message}
    import torch.distributed as dist

    try:
        store = dist.distributed_c10d._get_default_store()
        store.set(f"{_ERROR_KEY}{rank}", message)
        if rank == 0:
            for other in range(1, world):
                key = f"{_ERROR_KEY}{other}"
                if store.check([key]):
                    return {"rank": other, "error": store.get(key).decode()}
    except Exception:  # the store is gone with the group: report what this rank knows
        pass
    return {"rank": rank, "error": message}


_WRAPPERS = ("Py4JJavaError", "SparkException", "PythonException", "ChildFailedError")


def _first_user_error(text: str) -> str:
    """The first ``SomeError: message`` line that is not Spark's or torchrun's wrapper."""
    for m in re.finditer(r"(\w+(?:Error|Exception)): ([^\n]+)", text):
        name, message = m.group(1), m.group(2).strip()
        if name in _WRAPPERS or message.startswith(("Command ", "An error occurred")):
            continue
        return f"{name}: {message}"[:2000]
    return (text.strip().splitlines() or ["(no message)"])[0][:2000]


def run_torchdistributor(spark: Any, cfg: Any, src: ShardSource) -> tuple[dict[str, Any], dict]:
    """Run :func:`~.rank.hylo_rank` on ``cfg.workers`` TorchDistributor processes."""
    from dataclasses import asdict

    from pyspark import InheritableThread
    from pyspark.ml.torch.distributor import TorchDistributor

    sc = spark.sparkContext
    log.log(*rendezvous_notice(sc.master))
    distributor = TorchDistributor(
        num_processes=cfg.workers, local_mode=False, use_gpu=cfg.device == "cuda"
    )
    params = asdict(cfg)
    tag = f"async-spark-torchdist-{uuid.uuid4().hex[:12]}"
    box: dict[str, Any] = {}
    submitted = time.time()

    def target() -> None:
        sc.addJobTag(tag)
        try:
            box["result"] = distributor.run(_torchdist_main, params, src.as_dict(), submitted)
        except BaseException as exc:
            box["error"] = exc
        finally:
            sc.removeJobTag(tag)

    thread = InheritableThread(target=target, name=tag, daemon=True)
    thread.start()
    limit = 2 * float(cfg.timeout) + 60.0
    thread.join(limit)
    if thread.is_alive():
        sc.cancelJobsWithTag(tag)
        thread.join(30)
        raise TimeoutError(f"TorchDistributor did not finish in {limit:.0f} s; job cancelled")
    if "error" in box:
        raise RankFailedError(
            f"TorchDistributor stage failed: {_first_user_error(str(box['error']))}"
        ) from None
    result: dict[str, Any] = box["result"]
    if "rank_error" in result:
        failed = result["rank_error"]
        raise RankFailedError(
            f"rank {failed['rank']} of the TorchDistributor stage failed: {failed['error']}",
            int(failed["rank"]),
            result.get("logs"),
        )
    timings = result.pop("timings")
    logs = result.pop("logs")
    extra = {
        "startup_seconds": timings["ready_at"] - timings["submitted_at"],
        "rank_logs": {"0": logs},
    }
    return result, extra
