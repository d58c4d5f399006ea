"""Communication behind a small interface: one process, or torch.distributed (gloo / NCCL).

HyLo needs three collectives per inverse update (SC22, Sec. IV):

* one all-gather of every layer's kept rows (and KID's weight blocks), *bucketed* into a single
  flat buffer per rank (:meth:`Communicator.all_gather_flat`);
* one broadcast per owning rank of the inverses it computed (:meth:`Communicator.broadcast`);
* gradient averaging, which DDP does (:meth:`Communicator.all_reduce_mean_` for code without DDP).

:class:`LocalCommunicator` is the one-process implementation used by tests and single-GPU runs;
:class:`TorchCommunicator` wraps an initialized ``torch.distributed`` process group.  Both count
the bytes they send so that benchmarks can report communication per inverse update.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["Communicator", "LocalCommunicator", "TorchCommunicator"]


class Communicator(ABC):
    """Collectives needed by the HyLo preconditioner.

    Attributes
    ----------
    bytes_sent : int
        Bytes this rank contributed to gathers and broadcasts so far (payload only, no padding).
    """

    def __init__(self) -> None:
        self.bytes_sent = 0

    @property
    @abstractmethod
    def rank(self) -> int:
        """This process's rank in ``[0, world_size)``."""

    @property
    @abstractmethod
    def world_size(self) -> int:
        """Number of processes."""

    @abstractmethod
    def all_gather_flat(self, buffer: Tensor) -> list[Tensor]:
        """Gather a 1-D buffer (sizes may differ between ranks); returns one per rank."""

    @abstractmethod
    def broadcast(self, tensor: Tensor, src: int) -> Tensor:
        """Return ``src``'s ``tensor`` on every rank (shape and dtype must agree)."""

    @abstractmethod
    def all_reduce_mean_(self, tensors: Iterable[Tensor]) -> None:
        """Average tensors across ranks in place."""


class LocalCommunicator(Communicator):
    """The one-process communicator: world size 1, every collective is the identity."""

    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    def all_gather_flat(self, buffer: Tensor) -> list[Tensor]:
        return [buffer]

    def broadcast(self, tensor: Tensor, src: int) -> Tensor:
        if src != 0:
            raise ValueError(f"src must be in [0, world_size) = [0, 1), got {src}")
        return tensor

    def all_reduce_mean_(self, tensors: Iterable[Tensor]) -> None:
        return None


class TorchCommunicator(Communicator):
    """Collectives of an initialized ``torch.distributed`` process group (gloo or NCCL).

    Parameters
    ----------
    group : ProcessGroup, optional
        The group to use; the default group if ``None``.

    Notes
    -----
    With NCCL, buffers must live on the rank's CUDA device (the preconditioner keeps them on the
    device of the layer).  :meth:`all_gather_flat` first gathers the sizes (one int64 per rank),
    then pads every buffer to the largest size for one ``all_gather``.
    """

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("TorchCommunicator needs an initialized torch.distributed group")
        self.group = group
        self._rank = dist.get_rank(group)
        self._world = dist.get_world_size(group)

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world

    def all_gather_flat(self, buffer: Tensor) -> list[Tensor]:
        if buffer.ndim != 1:
            raise ValueError(f"buffer must be 1-D, got shape {tuple(buffer.shape)}")
        size = torch.tensor([buffer.numel()], dtype=torch.int64, device=buffer.device)
        sizes = [torch.empty_like(size) for _ in range(self._world)]
        dist.all_gather(sizes, size, group=self.group)
        counts = [int(s.item()) for s in sizes]
        longest = max(counts)
        padded = torch.zeros(longest, dtype=buffer.dtype, device=buffer.device)
        padded[: buffer.numel()] = buffer
        out = [torch.empty_like(padded) for _ in range(self._world)]
        dist.all_gather(out, padded, group=self.group)
        self.bytes_sent += buffer.numel() * buffer.element_size()
        return [o[:c] for o, c in zip(out, counts, strict=True)]

    def broadcast(self, tensor: Tensor, src: int) -> Tensor:
        if not 0 <= src < self._world:
            raise ValueError(f"src must be in [0, world_size) = [0, {self._world}), got {src}")
        tensor = tensor.contiguous()
        global_src = src if self.group is None else dist.get_global_rank(self.group, src)
        dist.broadcast(tensor, global_src, group=self.group)
        if src == self._rank:
            self.bytes_sent += tensor.numel() * tensor.element_size()
        return tensor

    def all_reduce_mean_(self, tensors: Iterable[Tensor]) -> None:
        for t in tensors:
            dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group)
            t.div_(self._world)
