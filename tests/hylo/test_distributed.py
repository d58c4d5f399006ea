"""2 and 4 CPU processes (gloo on 127.0.0.1) give the same update as one process."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from async_spark.hylo import HyLo, TorchCommunicator
from async_spark.hylo.distributed import launch

# (method, rank_ratio, extra kwargs): all exact at full rank
CONFIGS = [
    ("sngd", 1.0, {}),
    ("kis", 1.0, {}),
    ("kid", 1.0, {}),
    ("hybrid", 1.0, {"switch": "auto"}),
    ("sngd", 1.0, {"assignment": "contiguous"}),
    ("kid", 1.0, {"fisher_window": 2}),
]
STEPS = 3
GLOBAL_BATCH = 12


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, kernel_size=(1, 3), padding=(0, 1))
        self.fc = nn.Linear(3 * 6, 5)
        self.out = nn.Linear(5, 3)

    def forward(self, x):
        h = torch.relu(self.conv(x)).flatten(1)
        return self.out(torch.tanh(self.fc(h)))


def _batch(step):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(GLOBAL_BATCH, 2, 1, 6, generator=g)
    y = torch.randint(0, 3, (GLOBAL_BATCH,), generator=g)
    return x, y


def _train(method, ratio, kwargs, rank=0, world=1, comm=None):
    torch.manual_seed(0)
    net = Net()
    model = DDP(net) if world > 1 else net
    precond = HyLo(
        model, method=method, rank_ratio=ratio, damping=0.05, communicator=comm, **kwargs
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    per = GLOBAL_BATCH // world
    grads = []
    for step in range(STEPS):
        x, y = _batch(step)
        x, y = x[rank * per : (rank + 1) * per], y[rank * per : (rank + 1) * per]
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        precond.step()
        grads.append(torch.cat([p.grad.reshape(-1) for p in net.parameters()]).clone())
        opt.step()
    params = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    return torch.stack(grads), params


def _worker(rank, world, out_dir):
    comm = TorchCommunicator()
    results = {}
    for i, (method, ratio, kwargs) in enumerate(CONFIGS):
        results[f"grads{i}"], results[f"params{i}"] = _train(
            method, ratio, kwargs, rank, world, comm
        )
    # low rank KIS: ranks sample differently but must agree on the update
    results["kis_low"] = _train("kis", 0.5, {}, rank, world, comm)[0]
    results["bytes"] = torch.tensor([comm.bytes_sent])
    results["nan_updates"] = torch.tensor([_nan_on_rank0(rank, world, comm)])
    torch.save(results, f"{out_dir}/rank{rank}.pt")


def _nan_on_rank0(rank, world, comm):
    """Rank 0 feeds a non-finite input at the second step: every rank must skip that inverse
    update together (no hang, no error) and keep its first inverses."""
    torch.manual_seed(0)
    model = DDP(Net())
    precond = HyLo(model, method="kid", rank_ratio=0.5, damping=0.05, communicator=comm)
    per = GLOBAL_BATCH // world
    for step in range(2):
        x, y = _batch(step)
        x, y = x[rank * per : (rank + 1) * per].clone(), y[rank * per : (rank + 1) * per]
        if step == 1 and rank == 0:
            x[0, 0, 0, 0] = float("nan")
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
        precond.step()
    return precond.inverse_updates


@pytest.mark.parametrize("world", [2, 4])
def test_processes_match_one_process(world, tmp_path):
    launch(_worker, world, args=(str(tmp_path),), timeout=150)
    res = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(world)]
    for i, (method, ratio, kwargs) in enumerate(CONFIGS):
        ref_grads, ref_params = _train(method, ratio, kwargs)
        for r in range(world):
            torch.testing.assert_close(res[r][f"grads{i}"], ref_grads, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(res[r][f"params{i}"], ref_params, rtol=1e-5, atol=1e-5)
    for r in range(1, world):
        torch.testing.assert_close(res[r]["kis_low"], res[0]["kis_low"], rtol=1e-6, atol=1e-7)
    assert all(int(res[r]["bytes"]) > 0 for r in range(world))
    assert all(int(res[r]["nan_updates"]) == 1 for r in range(world))
