"""Run a torch training function as one Spark **barrier stage**: one task per rank.

The stage (``rdd.barrier().mapPartitions(task)``) is scheduled all-or-nothing, so the ranks start
together and a failure of any of them fails (and, as ``spark.stage.maxConsecutiveAttempts``
allows, reruns) the whole stage. Each task

1. reads **its own partition** of the training RDD (numpy blocks or Rows; never through the
   driver) and concatenates it into one ``(x, y)`` shard;
2. finds its device: on CUDA the GPU Spark assigned to it (``TaskContext.resources()["gpu"]``,
   requested by a stage-level resource profile that :func:`gpu_resource_profile` builds), on CPU
   none;
3. meets the other ranks: rank 0 opens a ``torch.distributed.TCPStore`` on a free port of its
   executor's address (listening on that address only, not on every interface:
   :func:`~async_spark.hylo.distributed.tcp_store`) and the address goes to every rank through
   ``BarrierTaskContext.allGather``;
   then ``init_process_group`` (NCCL on CUDA, gloo on CPU) with a timeout, so that no collective
   waits forever;
4. runs ``train_fn(ctx, shard, *args)`` and returns ``{"rank", "result", "logs", "timings"}``:
   rank 0's ``result`` (numpy arrays and JSON values -- never a pickled module) and every rank's
   log lines come back to the driver.

A rank that raises fails its task with a one-line marker (``async_spark rank R failed: ...``) and
its last log lines; Spark kills the other ranks of the stage (their Python workers are stopped),
and :meth:`BarrierLauncher.run` raises :class:`RankFailedError` with that line. The driver also
bounds the whole stage (``timeout``): past it the job is cancelled by its tag and
:class:`TimeoutError` is raised.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np

__all__ = [
    "BarrierLauncher",
    "LaunchResult",
    "RankContext",
    "RankFailedError",
    "gpu_resource_profile",
    "concat_blocks",
]

log = logging.getLogger(__name__)

_MARKER = "async_spark rank"
_LOG_TAIL = 40  # log lines of a failed rank carried in its error


class RankFailedError(RuntimeError):
    """A rank of the barrier stage raised (``rank`` is None when it could not be told)."""

    def __init__(self, message: str, rank: int | None = None, logs: list[str] | None = None):
        super().__init__(message)
        self.rank = rank
        self.logs = logs or []


@dataclass
class RankContext:
    """What a rank's training function gets: its rank, the world, its device and a log."""

    rank: int
    world_size: int
    device: str  # "cpu" or "cuda:<index>"
    backend: str
    logs: list[str] = field(default_factory=list)
    t0: float = field(default_factory=time.perf_counter)

    def log(self, message: str) -> None:
        """Append a line to this rank's log (returned to the driver) and to the task's stderr."""
        line = f"[rank {self.rank} +{time.perf_counter() - self.t0:7.2f}s] {message}"
        self.logs.append(line)
        print(line, file=sys.stderr, flush=True)

    def torch_device(self) -> Any:
        import torch

        return torch.device(self.device)


@dataclass
class LaunchResult:
    """What came back from the stage."""

    result: Any  # rank 0's return value
    logs: dict[int, list[str]]  # rank -> log lines
    timings: dict[int, dict[str, float]]  # rank -> seconds of the task's phases
    wall_seconds: float  # driver time from submit to results
    launcher: str = "barrier"

    @property
    def startup_seconds(self) -> float:
        """Driver submit -> process group ready on the slowest rank (stage launch + rendezvous)."""
        return max((t.get("ready_at", 0.0) for t in self.timings.values()), default=0.0) - min(
            (t.get("submitted_at", 0.0) for t in self.timings.values()), default=0.0
        )


def gpu_resource_profile(
    device: str, gpus_per_task: float = 1.0, cpus_per_task: int = 1
) -> Any | None:
    """The stage-level resource profile of the training stage: GPUs per task on CUDA, else None.

    Parameters
    ----------
    device : {"cpu", "cuda"}
    gpus_per_task : float > 0
        ``TaskResourceRequests().resource("gpu", amount)``; a fraction (e.g. 0.5) lets tasks of
        other stages share the GPU. Two NCCL ranks of one stage cannot share a GPU: the launcher
        refuses that with a clear error.
    cpus_per_task : int >= 1
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if not (isinstance(gpus_per_task, (int, float)) and 0 < float(gpus_per_task)):
        raise ValueError(f"gpus_per_task must be a number > 0, got {gpus_per_task!r}")
    if float(gpus_per_task) > 1 and float(gpus_per_task) != int(gpus_per_task):
        raise ValueError(f"gpus_per_task above 1 must be a whole number, got {gpus_per_task!r}")
    if isinstance(cpus_per_task, bool) or not isinstance(cpus_per_task, int) or cpus_per_task < 1:
        raise ValueError(f"cpus_per_task must be an integer >= 1, got {cpus_per_task!r}")
    if device == "cpu":
        return None
    from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests

    requests = TaskResourceRequests().cpus(cpus_per_task).resource("gpu", float(gpus_per_task))
    return ResourceProfileBuilder().require(requests).build


def concat_blocks(items: Iterable[Any]) -> tuple[np.ndarray, np.ndarray]:
    """One ``(x, y)`` shard from a partition's elements: ``(x, y)`` blocks or ``(features, label)``
    rows (lists, numpy arrays or Spark ML vectors)."""
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    row_x: list[Any] = []
    row_y: list[Any] = []
    for item in items:
        a, b = item[0], item[1]
        if isinstance(a, np.ndarray) and a.ndim >= 2:
            xs.append(a)
            ys.append(np.asarray(b))
        else:
            row_x.append(a.toArray() if hasattr(a, "toArray") else a)
            row_y.append(b.toArray() if hasattr(b, "toArray") else b)
    if row_x:
        xs.append(np.asarray(row_x, dtype=np.float32))
        ys.append(np.asarray(row_y))
    if not xs:
        return np.zeros((0, 0), np.float32), np.zeros((0,), np.float32)
    return np.concatenate(xs).astype(np.float32, copy=False), np.concatenate(ys)


def _gpu_address(device: str, rank: int, logs: RankContext) -> str:
    """``cuda:<i>`` from the GPU Spark assigned to this task, else ``cpu``."""
    if device == "cpu":
        return "cpu"
    import torch
    from pyspark import TaskContext

    if not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but this executor has no usable CUDA device")
    ctx = TaskContext.get()
    resources = ctx.resources() if ctx is not None else {}
    if "gpu" in resources and resources["gpu"].addresses:
        addr = resources["gpu"].addresses[0]
        # With CUDA_VISIBLE_DEVICES set by the cluster manager, addresses are still the
        # physical ids the discovery script printed; map them to torch's visible indices.
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible:
            ids = [v.strip() for v in visible.split(",")]
            index = ids.index(addr) if addr in ids else int(addr)
        else:
            index = int(addr)
        logs.log(f"GPU {addr} assigned by Spark -> cuda:{index}")
        return f"cuda:{index}"
    index = rank % max(1, torch.cuda.device_count())
    logs.log(f"no GPU assigned by Spark (local master?): using cuda:{index}")
    return f"cuda:{index}"


def _barrier_task(
    train_fn: Callable[..., Any],
    args: tuple[Any, ...],
    device: str,
    timeout: float,
    threads: int,
    submitted_at: float,
    source: dict[str, Any] | None = None,
) -> Callable[[Iterator[Any]], Iterator[dict[str, Any]]]:
    """The closure that runs in each barrier task (captures plain values and ``train_fn``).

    With ``source`` (a :class:`~.data.ShardSource` as a dict) a rank reads its shard from it
    instead of from the task's partition (the Spark Connect launch has no RDD partition to give).
    """

    def task(items: Iterator[Any]) -> Iterator[dict[str, Any]]:
        from pyspark import BarrierTaskContext

        bctx = BarrierTaskContext.get()
        rank = bctx.partitionId()
        infos = bctx.getTaskInfos()
        world = len(infos)
        backend = "nccl" if device == "cuda" else "gloo"
        ctx = RankContext(rank=rank, world_size=world, device="cpu", backend=backend)
        timings: dict[str, float] = {"submitted_at": submitted_at, "started_at": time.time()}
        handler = _ListHandler(ctx)
        pkg_logger = logging.getLogger("async_spark")
        pkg_logger.addHandler(handler)
        pg_ready = False
        try:
            import torch
            import torch.distributed as dist

            from async_spark.hylo.distributed import tcp_store

            torch.set_num_threads(threads)
            if dist.is_initialized():  # left by a failed task in this reused Python worker
                dist.destroy_process_group()
            t = time.perf_counter()
            if source is None:
                x, y = concat_blocks(items)
            else:
                from .data import ShardSource, load_shard

                x, y = load_shard(ShardSource(**source), rank, world)
            timings["read_seconds"] = time.perf_counter() - t
            ctx.log(f"read {x.shape[0]} rows of its partition in {timings['read_seconds']:.3f}s")
            ctx.device = _gpu_address(device, rank, ctx)
            host = infos[rank].address.rsplit(":", 1)[0]
            td = timedelta(seconds=timeout)
            store = None
            port = 0
            if rank == 0:  # listening on this task's own address only
                store = tcp_store(host, 0, world, is_master=True, timeout=td)
                port = int(store.port)
            me = {
                "rank": rank,
                "host": host,
                "port": port,
                "device": ctx.device,
                "pid": os.getpid(),
            }
            everyone = [json.loads(m) for m in bctx.allGather(json.dumps(me))]
            master = everyone[0]
            if backend == "nccl":
                seen = [(e["host"], e["device"]) for e in everyone]
                if len(set(seen)) != len(seen):
                    raise RuntimeError(
                        "two NCCL ranks were given the same GPU on one host "
                        f"({seen}); use gpus_per_task >= 1 for the training stage"
                    )
                os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
                torch.cuda.set_device(ctx.torch_device())
            if all(e["host"] in ("127.0.0.1", "localhost") for e in everyone):
                os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
            if rank != 0:
                store = tcp_store(
                    master["host"], int(master["port"]), world, is_master=False, timeout=td
                )
            dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=td)
            pg_ready = True
            timings["ready_at"] = time.time()
            ctx.log(
                f"process group ready ({backend}, world {world}, master "
                f"{master['host']}:{master['port']}, device {ctx.device})"
            )
            t = time.perf_counter()
            result = train_fn(ctx, (x, y), *args)
            timings["train_seconds"] = time.perf_counter() - t
            ctx.log(f"training done in {timings['train_seconds']:.2f}s")
        except BaseException as exc:  # one line the driver can find, and this rank's log tail
            # The process group is *not* destroyed here: closing it would make the other ranks'
            # collectives fail at once and race this rank's error to the driver. They stay
            # blocked until Spark kills the stage's tasks (or their collective timeout fires);
            # the next task in this reused worker destroys the stale group first.
            pg_ready = False
            tail = "\n".join(ctx.logs[-_LOG_TAIL:])
            one_line = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise RuntimeError(
                f"{_MARKER} {rank} failed: {one_line}\n--- rank {rank} log ---\n{tail}\n"
                f"--- rank {rank} traceback ---\n{traceback.format_exc()}"
            ) from exc
        finally:
            pkg_logger.removeHandler(handler)
            if pg_ready:
                import torch.distributed as dist

                try:
                    dist.destroy_process_group()
                except Exception:  # pragma: no cover - best effort
                    pass
        yield {
            "rank": rank,
            "result": result if rank == 0 else None,
            "logs": ctx.logs,
            "timings": timings,
        }

    return task


_CONNECT_SCHEMA = "rank long, payload binary"


class _ArrowBarrierTask:
    """The ``mapInArrow(..., barrier=True)`` function of the Spark Connect launch: runs the rank
    (:func:`_barrier_task`) and returns its row, pickled, as one binary cell. Like any Spark
    ``collect``, the rows come from this application's own executors."""

    def __init__(self, task: Callable[[Iterator[Any]], Iterator[dict[str, Any]]]) -> None:
        self.task = task

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pickle

        import pyarrow as pa

        for _ in batches:  # the rank's id row: the rank is the barrier task's partition
            pass
        for row in self.task(iter(())):
            yield pa.RecordBatch.from_pydict(
                {"rank": [int(row["rank"])], "payload": [pickle.dumps(row)]},
                schema=pa.schema([("rank", pa.int64()), ("payload", pa.binary())]),
            )


class _ListHandler(logging.Handler):
    def __init__(self, ctx: RankContext) -> None:
        super().__init__(logging.INFO)
        self.ctx = ctx

    def emit(self, record: logging.LogRecord) -> None:
        self.ctx.logs.append(f"[rank {self.ctx.rank}] {record.levelname} {record.getMessage()}")


def _failure_from(text: str) -> RankFailedError:
    m = re.search(rf"{_MARKER} (\d+) failed: ([^\n]*)", text)
    if m:
        rank = int(m.group(1))
        logs = re.search(rf"--- rank {rank} log ---\n(.*?)\n--- rank {rank} traceback", text, re.S)
        return RankFailedError(
            f"rank {rank} of the barrier stage failed: {m.group(2)}",
            rank,
            logs.group(1).splitlines() if logs else [],
        )
    first = next((ln for ln in text.splitlines() if ln.strip()), text)
    return RankFailedError(f"the barrier stage failed: {first.strip()[:2000]}")


class BarrierLauncher:
    """Run ``train_fn(ctx, (x, y), *args)`` on ``num_ranks`` ranks of one barrier stage.

    Parameters
    ----------
    spark : SparkSession
    num_ranks : int >= 1
        World size = tasks of the stage = partitions of the training RDD.
    device : {"cpu", "cuda"}
        NCCL with a GPU resource profile on CUDA, gloo and no profile on CPU.
    gpus_per_task, cpus_per_task :
        The profile's task requests (:func:`gpu_resource_profile`).
    timeout : float
        Seconds for the rendezvous and every collective (``init_process_group(timeout=...)``)
        and, times two plus a minute, for the whole stage as seen by the driver.
    threads : int
        ``torch.set_num_threads`` in each rank.
    retry : bool
        Let Spark rerun the whole stage when a rank fails, up to
        ``spark.stage.maxConsecutiveAttempts`` attempts (default 4). Spark never reruns a failed
        barrier *result* stage ("Could not recover from a failed barrier ResultStage"), so with
        ``retry=True`` the ranks' outputs go through a one-partition shuffle, which makes the
        barrier stage a shuffle-map stage that Spark does rerun. ``False``: one attempt.
    slot_wait : float
        Seconds to wait for ``num_ranks`` task slots to register before refusing (a barrier
        stage larger than the cluster would otherwise retry for minutes).
    """

    def __init__(
        self,
        spark: Any,
        num_ranks: int,
        *,
        device: str = "cpu",
        gpus_per_task: float = 1.0,
        cpus_per_task: int = 1,
        timeout: float = 600.0,
        threads: int = 1,
        retry: bool = True,
        slot_wait: float = 60.0,
    ) -> None:
        if isinstance(num_ranks, bool) or not isinstance(num_ranks, int) or num_ranks < 1:
            raise ValueError(f"num_ranks must be an integer >= 1, got {num_ranks!r}")
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        from async_spark.engine.connect import is_connect

        self.spark = spark
        self.connect = is_connect(spark)  # Spark Connect: no SparkContext, a DataFrame launch
        self.sc = None if self.connect else spark.sparkContext
        self.num_ranks = num_ranks
        self.device = device
        master = str(spark.conf.get("spark.master", "")) if self.sc is None else self.sc.master
        self.local_master = master == "local" or master.startswith("local[")
        profile = gpu_resource_profile(device, gpus_per_task, cpus_per_task)
        if profile is not None and self.local_master:
            log.warning("%s does not schedule GPUs: ranks use cuda:<rank %% count>", master)
            profile = None
        self.profile = profile
        self.timeout = float(timeout)
        self.threads = int(threads)
        self.slot_wait = float(slot_wait)
        self.retry = bool(retry)

    def _slots(self) -> int:
        """Task slots of the default profile now (Spark's own count; else defaultParallelism)."""
        if self.sc is None:
            from async_spark.engine.connect import default_parallelism

            return default_parallelism(self.spark)
        try:
            jsc = self.sc._jsc.sc()
            rp = jsc.resourceProfileManager().defaultResourceProfile()
            return int(jsc.maxNumConcurrentTasks(rp))
        except Exception:  # an internal API: fall back to the public estimate
            return int(self.sc.defaultParallelism)

    def _check_slots(self) -> None:
        if self.profile is not None:  # GPU slots: Spark's own check (and our timeout) decide
            return
        deadline = time.monotonic() + self.slot_wait
        while True:
            slots = self._slots()
            if slots >= self.num_ranks:
                return
            if time.monotonic() > deadline:
                raise ValueError(
                    f"a barrier stage of {self.num_ranks} ranks needs {self.num_ranks} task "
                    f"slots at once; the cluster has {slots}"
                )
            time.sleep(0.5)

    def run(
        self, train_fn: Callable[..., Any], data: Any, args: tuple[Any, ...] = ()
    ) -> LaunchResult:
        """Run the stage on ``data`` (an RDD with ``num_ranks`` partitions) and wait for it.

        Raises
        ------
        RankFailedError
            A rank raised (the message names the rank and its exception).
        TimeoutError
            The stage did not finish within ``2 * timeout + 60`` seconds (the job is cancelled).
        """
        if self.connect:
            raise ValueError(
                "on a Spark Connect session the ranks read their shards from a source: use "
                "BarrierLauncher.run_source (or train_hylo_spark without data=)"
            )
        parts = data.getNumPartitions()
        if parts != self.num_ranks:
            raise ValueError(
                f"the training RDD must have one partition per rank ({self.num_ranks}), "
                f"got {parts}; repartition it first"
            )
        self._check_slots()
        submitted = time.time()
        task = _barrier_task(
            train_fn, tuple(args), self.device, self.timeout, self.threads, submitted
        )
        stage = data.barrier().mapPartitions(task)
        if self.profile is not None:
            stage = stage.withResources(self.profile)
        if self.retry:  # a shuffle-map barrier stage is rerun on failure, a result stage is not
            stage = stage.map(lambda row: (row["rank"], row)).partitionBy(1).values()
        sc = self.sc
        assert sc is not None

        def collect(tag: str) -> list[Any]:
            sc.addJobTag(tag)
            sc.setJobDescription(f"HyLo/torch barrier stage ({self.num_ranks} ranks)")
            try:
                return list(stage.collect())
            finally:
                sc.removeJobTag(tag)

        return self._wait(collect, sc.cancelJobsWithTag)

    def run_source(
        self, train_fn: Callable[..., Any], source: dict[str, Any], args: tuple[Any, ...] = ()
    ) -> LaunchResult:
        """Run the stage through the DataFrame API, each rank reading shard ``rank`` of
        ``source`` (a :class:`~.data.ShardSource` as a dict): one ``spark.range(W,
        numPartitions=W).mapInArrow(..., barrier=True)`` job with the same rendezvous
        (``BarrierTaskContext.allGather``). This is the launch of a Spark Connect session."""
        self._check_slots()
        submitted = time.time()
        task = _barrier_task(
            train_fn, tuple(args), self.device, self.timeout, self.threads, submitted, source
        )
        spark, world = self.spark, self.num_ranks
        options: dict[str, Any] = {"barrier": True}
        if self.profile is not None:
            options["profile"] = self.profile
        frame = spark.range(world, numPartitions=world).mapInArrow(
            _ArrowBarrierTask(task), _CONNECT_SCHEMA, **options
        )

        def collect(tag: str) -> list[Any]:
            import pickle

            if self.sc is not None:  # a classic session: SparkContext job tags only
                self.sc.addJobTag(tag)
            else:
                spark.addTag(tag)
            try:
                return [pickle.loads(r["payload"]) for r in frame.collect()]
            finally:
                if self.sc is not None:
                    self.sc.removeJobTag(tag)
                else:
                    spark.removeTag(tag)

        cancel = self.sc.cancelJobsWithTag if self.sc is not None else spark.interruptTag
        return self._wait(collect, cancel)

    def _wait(
        self, collect: Callable[[str], list[Any]], cancel: Callable[[str], Any]
    ) -> LaunchResult:
        """Collect the stage in a thread, bounded by ``2 * timeout + 60`` s (then cancelled)."""
        tag = f"async-spark-barrier-{uuid.uuid4().hex[:12]}"
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["rows"] = collect(tag)
            except BaseException as exc:
                box["error"] = exc

        import threading

        from pyspark import InheritableThread

        thread: threading.Thread
        if self.connect:  # the tag is added in the thread itself: a plain thread will do
            thread = threading.Thread(target=target, name=tag, daemon=True)
        else:
            thread = InheritableThread(target=target, name=tag, daemon=True)
        t0 = time.perf_counter()
        thread.start()
        limit = 2 * self.timeout + 60.0
        thread.join(limit)
        if thread.is_alive():
            cancel(tag)
            thread.join(30)
            raise TimeoutError(
                f"the barrier stage of {self.num_ranks} ranks did not finish in {limit:.0f} s; "
                "its job was cancelled"
            )
        wall = time.perf_counter() - t0
        if "error" in box:
            exc = box["error"]
            raise _failure_from(str(exc)) from None
        rows = sorted(box["rows"], key=lambda r: r["rank"])
        for r in rows:
            for line in r["logs"]:
                log.info("%s", line)
        return LaunchResult(
            result=rows[0]["result"],
            logs={r["rank"]: r["logs"] for r in rows},
            timings={r["rank"]: r["timings"] for r in rows},
            wall_seconds=wall,
        )
