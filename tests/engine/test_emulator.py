"""The virtual-time emulator: same trajectory as the real engine, exact staleness, cost model I/O."""

from __future__ import annotations

import argparse
import functools
import heapq
import json

import numpy as np
import pytest

from async_spark.data.dataset import open_dataset
from async_spark.engine import AsyncEngine, LocalTransport, Policy, StragglerModel
from async_spark.engine.emulator import CostModel, VirtualEngine, payload_nbytes
from async_spark.engine.engine import EngineError
from async_spark.solvers import TrainConfig, train_linear
from async_spark.solvers.emulation import calibrate, virtual_engine_factory


@pytest.fixture(scope="module")
def cancer1():
    return open_dataset("builtin:breast_cancer", 1, standardize=True, loss="logistic")


@pytest.fixture(scope="module")
def cancer3():
    return open_dataset("builtin:breast_cancer", 3, standardize=True, loss="logistic")


def _cfg(method: str, partitions: int, **kw) -> TrainConfig:
    base = dict(
        data="builtin:breast_cancer",
        method=method,
        partitions=partitions,
        step=0.05,
        batch_fraction=0.3,
        l2=1e-3,
        seed=11,
        max_updates=25,
        eval_every=1e9,  # one snapshot at the start and one at the end: no timing dependence
        quiet=True,
    )
    base.update(kw)
    return TrainConfig(**base)


def _path(result):
    """What must be identical: versions, staleness and blocks of every update, in order."""
    return [(t["version"], t["staleness"], t["block"]) for t in result.trace]


def _emulated(cfg, dataset, **options):
    cost = options.pop("cost", CostModel(task_overhead_seconds=0.01, seconds_per_nnz=1e-8))
    return train_linear(
        cfg, dataset=dataset, engine_factory=virtual_engine_factory(cost, **options)
    )


# --- the emulator reproduces the real engine -------------------------------------------------------
@pytest.mark.parametrize("method", ["sgd", "saga", "asgd", "asaga"])
def test_one_worker_reproduces_the_in_process_engine_exactly(cancer1, method):
    cfg = _cfg(method, 1)
    real = train_linear(
        cfg,
        dataset=cancer1,
        engine_factory=functools.partial(AsyncEngine, LocalTransport(), max_in_flight=1),
    )
    emu = _emulated(_cfg(method, 1), cancer1, workers=1)
    assert np.array_equal(real.theta, emu.theta)
    assert _path(real) == _path(emu)
    assert real.final_objective == emu.final_objective
    assert real.updates == emu.updates == 25


def test_synchronous_rounds_over_three_workers_match_the_in_process_engine(cancer3):
    """P results per round arrive in another order, so sums agree to rounding only."""
    for method in ("sgd", "saga"):
        real = train_linear(_cfg(method, 3), dataset=cancer3)
        emu = _emulated(_cfg(method, 3), cancer3)
        np.testing.assert_allclose(emu.theta, real.theta, rtol=0, atol=1e-12)
        assert _path(real) == _path(emu)


@pytest.mark.spark
@pytest.mark.parametrize("method", ["sgd", "saga"])
def test_one_worker_reproduces_the_spark_engine(spark, cancer1, method):
    from async_spark.engine.spark import SparkTransport

    real = train_linear(
        _cfg(method, 1),
        spark=spark,
        dataset=cancer1,
        engine_factory=functools.partial(
            AsyncEngine, SparkTransport(spark.sparkContext), max_in_flight=1
        ),
    )
    emu = _emulated(_cfg(method, 1), cancer1, workers=1)
    assert np.array_equal(real.theta, emu.theta)
    assert _path(real) == _path(emu)
    assert emu.final_objective == pytest.approx(real.final_objective, abs=1e-12)


# --- exact staleness under a hand-built schedule ----------------------------------------------------
def _run_schedule(durations, results, policy=None, **options):
    engine = VirtualEngine(
        lambda block, model, args: block,
        num_blocks=len(durations),
        policy=policy or Policy.asynchronous(),
        initial_model=0,
        task_seconds=lambda ticket: durations[ticket.block],
        **options,
    )
    seen = []
    with engine:
        for r in engine.results():
            seen.append((engine.elapsed(), r.block, r.staleness, r.version))
            engine.publish(engine.version + 1)
            if len(seen) >= results:
                break
    return seen, engine


def test_staleness_of_a_hand_built_schedule_is_exact():
    # Blocks take 1.0, 2.7 and 4.5 virtual seconds; worked out by hand.
    seen, engine = _run_schedule([1.0, 2.7, 4.5], 12)
    expected = [
        (1.0, 0, 0),
        (2.0, 0, 0),
        (2.7, 1, 2),
        (3.0, 0, 1),
        (4.0, 0, 0),
        (4.5, 2, 5),
        (5.0, 0, 1),
        (5.4, 1, 4),
        (6.0, 0, 1),
        (7.0, 0, 0),
        (8.0, 0, 0),
        (8.1, 1, 3),
    ]
    assert [(b, s) for _, b, s, _ in seen] == [(b, s) for _, b, s in expected]
    np.testing.assert_allclose([t for t, *_ in seen], [t for t, *_ in expected], atol=1e-12)
    snap = engine.snapshot()
    assert snap["staleness_histogram"] == {0: 5, 1: 3, 2: 1, 3: 1, 4: 1, 5: 1}


def _reference_staleness(durations, results):
    """An independent event loop: P workers, fixed durations, every result applied at once."""
    events = [(d, b, 0) for b, d in enumerate(durations)]
    heapq.heapify(events)
    version, out = 0, []
    while len(out) < results:
        t, b, v = heapq.heappop(events)
        out.append((t, b, version - v))
        version += 1
        heapq.heappush(events, (t + durations[b], b, version))
    return out


def test_staleness_matches_an_independent_event_loop():
    durations = list(np.random.default_rng(5).uniform(0.5, 3.0, size=7))
    seen, _ = _run_schedule(durations, 200)
    ref = _reference_staleness(durations, 200)
    assert [(b, s) for _, b, s, _ in seen] == [(b, s) for _, b, s in ref]
    np.testing.assert_allclose([t for t, *_ in seen], [t for t, *_ in ref], rtol=1e-12)


def test_staleness_bound_rejects_and_cancels_in_virtual_time():
    seen, engine = _run_schedule([1.0, 2.7, 4.5], 30, policy=Policy.asynchronous(tau=2))
    assert max(s for _, _, s, _ in seen) <= 2
    c = engine.snapshot()["counts"]
    assert c["cancelled"] >= 1  # block 2 is obsolete before it finishes, every time
    assert all(b != 2 for _, b, _, _ in seen)
    assert engine.core.accounting_closes()


def test_contention_shares_cores_by_processor_sharing():
    # A synchronous round of two tasks of 1 and 2 seconds on one core: both run at half speed
    # until the first is done (t = 2), then the second alone (t = 3). With two cores: t = 1, 2.
    for cores, expected in ((1, [2.0, 3.0]), (2, [1.0, 2.0]), (None, [1.0, 2.0])):
        seen, _ = _run_schedule([1.0, 2.0], 2, policy=Policy.sync(), cost=CostModel(cores=cores))
        np.testing.assert_allclose([t for t, *_ in seen], expected, atol=1e-12)
    # Asynchronous: block 0 starts again at t = 2 and shares the core with block 1's last second.
    seen, _ = _run_schedule([1.0, 2.0], 3, cost=CostModel(cores=1))
    np.testing.assert_allclose([t for t, *_ in seen], [2.0, 4.0, 4.0], atol=1e-12)


def test_stragglers_and_driver_time_pass_in_virtual_time():
    # intensity:1 with a 1 s base: block 0 sleeps 1 s after its 1 s of compute.
    seen, _ = _run_schedule(
        [1.0, 1.0],
        6,
        stragglers=StragglerModel("intensity", intensity=1.0),
        straggler_base_seconds=1.0,
    )
    assert [(round(t, 9), b) for t, b, _, _ in seen] == [
        (1.0, 1),
        (2.0, 0),
        (2.0, 1),
        (3.0, 1),
        (4.0, 0),
        (4.0, 1),
    ]
    # One worker, 1 s tasks, 0.5 s of driver time per result: a result every 1.5 s.
    seen, _ = _run_schedule([1.0], 4, cost=CostModel(driver_seconds=0.5))
    np.testing.assert_allclose([t for t, *_ in seen], [1.5, 3.0, 4.5, 6.0])
    # ... and 0.25 s more per published version (the update rule), after the result is read.
    seen, _ = _run_schedule([1.0], 3, cost=CostModel(driver_seconds=0.5, update_seconds=0.25))
    np.testing.assert_allclose([t for t, *_ in seen], [1.5, 3.25, 5.0])
    # ... and 0.125 s of the transport's own messaging per outcome, on top of both (the task
    # returns an int: 8 bytes back, priced at 0 here).
    cost = CostModel(driver_seconds=0.5, update_seconds=0.25, message_seconds=0.125)
    seen, engine = _run_schedule([1.0], 3, cost=cost)
    np.testing.assert_allclose([t for t, *_ in seen], [1.625, 3.5, 5.375])
    assert engine.virtual_transport.stats()["driver_seconds_per_result"] == pytest.approx(0.875)
    # In measured mode the messaging is charged as well (the emulator does not run it).
    measured = CostModel(driver_seconds=None, message_seconds=10.0)
    seen, _ = _run_schedule([1.0], 3, cost=measured)
    gaps = np.diff([0.0] + [t for t, *_ in seen])
    assert all(11.0 <= g < 11.5 for g in gaps), gaps


def test_messaging_is_priced_per_task_and_per_byte():
    model = np.zeros(1000)  # 8000 bytes out, 8000 back (the task returns the model)
    engine = VirtualEngine(
        lambda block, m, args: m,
        num_blocks=1,
        policy=Policy.asynchronous(),
        initial_model=model,
        task_seconds=lambda ticket: 1.0,
        cost=CostModel(message_seconds=0.5, message_seconds_per_byte=1e-4),
    )
    with engine:
        results = engine.results()
        next(results)
        assert engine.elapsed() == pytest.approx(1.0 + 0.5 + 1.6)
        next(results)
        assert engine.elapsed() == pytest.approx(2 * 3.1)
    assert CostModel().message_cpu_seconds(10**6) == 0.0


def test_messaging_is_charged_for_a_failed_task_too():
    def failing(block, model, args):
        raise RuntimeError("boom")

    engine = VirtualEngine(
        failing,
        num_blocks=1,
        policy=Policy.asynchronous(),
        initial_model=np.zeros(2),
        task_seconds=lambda ticket: 1.0,
        max_retries=1,
        cost=CostModel(task_overhead_seconds=1.0, message_seconds=0.5),
    )
    with engine:
        with pytest.raises(EngineError, match="every block was given up"):
            list(engine.results())
        assert engine.snapshot()["counts"]["failed"] == 2
        # two attempts, each 1 s of overhead and 0.5 s of messaging, and the retry's backoff
        assert engine.virtual_transport.driver_seconds_total == pytest.approx(1.0)
        assert engine.elapsed() >= 3.0


def test_communication_time_follows_bandwidth_and_latency():
    model = np.zeros(1000)  # 8000 bytes each way (the task returns the model)
    engine = VirtualEngine(
        lambda block, m, args: m,
        num_blocks=1,
        policy=Policy.asynchronous(),
        initial_model=model,
        task_seconds=lambda ticket: 0.0,
        cost=CostModel(bandwidth_bytes_per_second=8000.0, latency_seconds=0.25),
    )
    with engine:
        r = next(iter(engine.results()))
        assert engine.elapsed() == pytest.approx(2 * (0.25 + 1.0))
        assert r.seconds == pytest.approx(2.5)
    assert payload_nbytes((model, [model], {"a": 1.0})) == 16008


def test_nonzero_count_of_a_linear_task(cancer3):
    from async_spark.solvers.linear import build_model
    from async_spark.solvers.worker import LinearTask, TaskArgs, sample_rows

    source, desc = open_dataset("builtin:synthetic?n=3000&d=200&nnz=10", 2, loss="logistic")
    task = LinearTask(source, build_model(TrainConfig(), desc), seed=3)
    block = source.load(1)
    idx = sample_rows(3, 1, 4, block.rows, 0.25)
    assert task.work(1, TaskArgs(4, 0.25)) == block.X[idx].nnz
    assert task.work(0, object()) is None


# --- the cost model ------------------------------------------------------------------------------
def test_cost_model_round_trips_through_json(tmp_path):
    cost = CostModel(
        task_overhead_seconds=0.07,
        seconds_per_nnz=3.5e-9,
        compute_fixed_seconds=1e-4,
        bandwidth_bytes_per_second=1.25e9,
        latency_seconds=5e-4,
        cores=2,
        driver_seconds=None,
        source="test",
    )
    path = tmp_path / "cost.json"
    cost.save(path)
    data = json.loads(path.read_text())  # plain JSON, no pickle
    assert data["format"] == "async-spark-cost-model/1" and data["cores"] == 2
    assert CostModel.load(path) == cost
    assert CostModel.from_dict(cost.to_dict()) == cost


@pytest.mark.spark
@pytest.mark.parametrize("transport", ["resident", "jobs"])
def test_calibration_on_spark_round_trips(spark, tmp_path, transport):
    source, desc = open_dataset("builtin:synthetic?n=4000&d=500&nnz=20", 2, loss="logistic")
    path = tmp_path / "cal.json"
    cost = calibrate(
        spark,
        source,
        desc,
        fractions=(0.2, 1.0),
        tasks_per_fraction=2,
        message_tasks=30,
        out=path,
        transport=transport,
    )
    assert cost.task_overhead_seconds > 0 and cost.seconds_per_nnz is not None
    # the transport's own driver CPU per task: sockets and frames, or a job's submission from
    # Python, beyond the emulator's in-process bookkeeping (microseconds, not seconds)
    # (on data this small the split between per task and per byte is noise; their sum is not)
    assert 0 < cost.message_cpu_seconds(8 * desc.d) < 0.05
    assert cost.seconds_per_nnz >= 0 and "calibrated on" in cost.source
    assert f"{transport} transport" in cost.source
    assert CostModel.load(path) == cost
    with pytest.raises(ValueError, match="transport must be 'resident' or 'jobs'"):
        calibrate(spark, source, desc, transport="carrier-pigeon")
    with pytest.raises(ValueError, match="message_tasks must be an integer >= 1"):
        calibrate(spark, source, desc, message_tasks=0)


@pytest.mark.spark
@pytest.mark.parametrize("method", ["saga", "ahb", "dcasgd"])
def test_calibration_measures_the_tasks_of_any_method_of_the_table(spark, method, monkeypatch):
    """What a task is sent comes from the method's row (its family at dispatch), not from a
    branch on its name: SAGA's tasks carry the old scalars of their rows, the others none."""
    from async_spark.solvers import methods

    source, desc = open_dataset("builtin:synthetic?n=2000&d=50&nnz=10", 2, loss="logistic")
    extras = []
    family = methods.METHODS[method].family
    real = type(family).at_dispatch

    def recording(self, dispatch):
        extra, memo = real(self, dispatch)
        # SAGA's old scalars travel as rows of the block's table (HeldRows)
        extras.append(None if extra is None else np.shape(extra.rows))
        return extra, memo

    monkeypatch.setattr(type(family), "at_dispatch", recording)
    cost = calibrate(
        spark,
        source,
        desc,
        method=method,
        fractions=(0.5, 1.0),
        tasks_per_fraction=2,
        message_tasks=4,
        transport="jobs",
    )
    assert f"method {method}" in cost.source and extras
    assert all((e is not None) == (method == "saga") for e in extras), extras
    with pytest.raises(ValueError, match="method must be one of"):
        calibrate(spark, source, desc, method="adam")


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"task_overhead_seconds": -1.0}, "task_overhead_seconds"),
        ({"seconds_per_nnz": float("nan")}, "seconds_per_nnz"),
        ({"compute_scale": 0.0}, "compute_scale"),
        ({"bandwidth_bytes_per_second": 0.0}, "bandwidth_bytes_per_second"),
        ({"latency_seconds": float("inf")}, "latency_seconds"),
        ({"cores": 0}, "cores"),
        ({"cores": 1.5}, "cores"),
        ({"driver_seconds": -0.1}, "driver_seconds"),
        ({"update_seconds": -0.1}, "update_seconds"),
        ({"message_seconds": float("nan")}, "message_seconds"),
        ({"message_seconds_per_byte": -1e-9}, "message_seconds_per_byte"),
        ({"overhead_uses_core": "yes"}, "overhead_uses_core"),
    ],
)
def test_bad_cost_parameters_are_refused_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        CostModel(**kwargs)


def test_bad_cost_files_and_engine_arguments_are_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"task_overhead_seconds": 0.1, "speed": 3}))
    with pytest.raises(ValueError, match="speed"):
        CostModel.load(bad)
    bad.write_text("not json")
    with pytest.raises(ValueError, match="not a JSON cost model"):
        CostModel.load(bad)
    for workers in (0, 3, True):
        with pytest.raises(ValueError, match="workers"):
            VirtualEngine(
                lambda b, m, a: 0,
                num_blocks=2,
                policy=Policy.asynchronous(),
                initial_model=0,
                workers=workers,
            )


# --- the command ----------------------------------------------------------------------------------
def _emulate(argv):
    from async_spark.cli.emulate import add_emulate_arguments, run_emulate

    parser = argparse.ArgumentParser()
    add_emulate_arguments(parser)
    return run_emulate(parser.parse_args(argv))


def test_emulate_command_writes_the_train_outputs(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["--data", "builtin:breast_cancer", "--standardize", "--workers", "4"]
    argv += ["--method", "asaga,saga", "--stragglers", "cloud", "--task-overhead", "0.05"]
    argv += ["--time-budget", "5", "--quiet", "--out", str(out)]
    assert _emulate(argv) == 0
    for method in ("asaga", "saga"):
        summary = json.loads((out / method / "summary.json").read_text())
        assert summary["partitions"] == 4 and summary["emulator"]["workers"] == 4
        assert summary["time_unit"] == "virtual seconds"
        assert 5.0 <= summary["wall_seconds"] < 6.0  # virtual seconds, not real ones
        assert (out / method / "trace.jsonl").read_text().count("\n") > 2
        assert (out / method / "model.npz").exists()
    assert "RESULT" in capsys.readouterr().out


def test_emulate_command_charges_the_transports_messaging(tmp_path):
    out = tmp_path / "run"
    argv = ["--data", "builtin:breast_cancer", "--workers", "4", "--method", "asaga"]
    argv += ["--message-seconds", "0.01", "--time-budget", "2", "--quiet", "--out", str(out)]
    assert _emulate(argv) == 0
    emulator = json.loads((out / "summary.json").read_text())["emulator"]
    assert emulator["cost_model"]["message_seconds"] == 0.01
    assert emulator["driver_seconds_total"] >= 0.01 * emulator["driver_results"] > 0


@pytest.mark.parametrize(
    "argv, flag",
    [
        ([], "--workers"),
        (["--workers", "0"], "--workers"),
        (["--workers", "4", "--partitions", "3"], "--partitions"),
        (["--workers", "4", "--latency", "-1"], "--latency"),
        (["--workers", "4", "--bandwidth", "0"], "--bandwidth"),
        (["--workers", "4", "--cores", "0"], "--cores"),
        (["--workers", "4", "--driver-seconds", "-2"], "--driver-seconds"),
        (["--workers", "4", "--message-seconds", "nan"], "--message-seconds"),
    ],
)
def test_emulate_command_refuses_bad_flags_by_name(argv, flag):
    with pytest.raises(ValueError, match=flag):
        _emulate(["--data", "builtin:breast_cancer", "--quiet", *argv])
