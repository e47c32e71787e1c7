"""The thread trainer: on a CPU, convolutional and recurrent modules, each slot on its own module copy.

``torch.func`` batches these layers slowly on a CPU; PyTorch's own kernels on one thread per slot are
faster. Each slot's arithmetic is that of a one-thread run, whatever the number of workers.
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
from torch import nn

from fedsample.engine.model_binding import BoundModel
from fedsample.engine.paper_models import Params
from fedsample.engine.trainers.base import LocalResult, LocalTask, SlotResult, Trainer, as_bound, stack_slots
from fedsample.engine.trainers.sequential import train_slot

__all__ = ["ThreadTrainer"]


@dataclass
class ThreadTrainer(Trainer):
    """Every slot on its own module copy, the slots spread over PyTorch's threads (``BoundModel.threaded``)."""

    model: BoundModel
    name: str = "batched"

    def __post_init__(self) -> None:
        self.model = as_bound(self.model)
        self._copies: list[nn.Module] = []

    def run(self, start: Params, task: LocalTask) -> LocalResult:
        """Every slot on its own module copy, the slots spread over PyTorch's threads, one thread each.

        Worker ``w`` trains slots ``w, w + W, ...`` in order; inside a worker PyTorch runs on one thread,
        so each slot's arithmetic is that of a one-thread run, whatever the number of workers. The
        caller's thread count is restored after.
        """
        k = task.plan.counts.size
        before = torch.get_num_threads()
        workers = max(1, min(k, before))
        copies = self._module_copies(workers, task.features)
        slots: list[SlotResult | None] = [None] * k

        def work(worker: int) -> None:
            torch.set_num_threads(1)  # this thread's own OpenMP setting
            for j in range(worker, k, workers):
                slots[j] = train_slot(copies[worker], j, start, task, self.model.loss, seeded=False)

        # Threads started after this read the count when they first run an operation: one.
        torch.set_num_threads(1)
        try:
            if workers == 1:
                work(0)
            else:
                with ThreadPoolExecutor(workers, thread_name_prefix="fedsample-slot") as pool:
                    list(pool.map(work, range(workers)))
        finally:
            torch.set_num_threads(before)
        return stack_slots([slot for slot in slots if slot is not None], start, task)

    def _module_copies(self, count: int, features: torch.Tensor) -> list[nn.Module]:
        """``count`` private copies of the training module on the data's device (kept between calls);
        channels-last on a CPU for 2-D convolutions of images, where PyTorch's CPU kernels are faster."""
        device = features.device
        if len(self._copies) < count or any(next(c.parameters()).device != device for c in self._copies[:1]):
            template = copy.deepcopy(self.model.train_module).to(device)
            if (
                device.type == "cpu"
                and features.dim() == 4
                and any(isinstance(m, nn.Conv2d) for m in template.modules())
            ):
                template = template.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
            self._copies = [copy.deepcopy(template) for _ in range(count)]
        return self._copies[:count]
