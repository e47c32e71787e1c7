"""A centralised dataset: feature and target arrays before they are split among clients."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from fedsample._validation import Options, invalid
from fedsample.data._checks import as_labels, frozen_view, infer_num_classes

__all__ = ["ArrayDataset", "Task", "check_arrays"]

Task = Literal["classification", "regression"]
_TASKS = ("classification", "regression")


def check_arrays(
    features: npt.ArrayLike,
    targets: npt.ArrayLike,
    *,
    task: str,
    num_classes: int | None,
    owner: str,
    prefix: str = "",
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], int | None]:
    """Validate and convert one pair of feature and target arrays to the data layer's dtypes.

    Features become float32, except integer features (token ids) which become int64. Targets become
    int64 class labels in ``[0, num_classes)`` for classification and float32 for regression.
    Returns read-only views and the (possibly inferred) number of classes.
    """
    if task not in _TASKS:
        raise invalid("task", owner, Options(("classification", "regression")), task)
    x = np.asarray(features)
    if x.ndim < 2 or x.dtype == np.bool_ or x.dtype.kind not in "iuf":
        raise invalid(f"{prefix}features", owner, "a numeric array of shape (N, ...) with at least 2 dimensions", x)
    x = x.astype(np.int64 if x.dtype.kind in "iu" else np.float32, copy=False)
    if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        raise invalid(f"{prefix}features", owner, "finite", "an array with NaN or infinite values")
    y: npt.NDArray[Any]
    if task == "classification":
        y = as_labels(targets, owner, name=f"{prefix}targets")
        num_classes = infer_num_classes(y, num_classes, owner)
    else:
        if num_classes is not None:
            raise invalid("num_classes", owner, "None for a regression task", num_classes)
        y = np.asarray(targets)
        if y.ndim != 1 or y.dtype == np.bool_ or y.dtype.kind not in "iuf":
            raise invalid(f"{prefix}targets", owner, "a 1-D numeric array", y)
        y = y.astype(np.float32, copy=False)
        if not np.all(np.isfinite(y)):
            raise invalid(f"{prefix}targets", owner, "finite", "an array with NaN or infinite values")
    if y.shape[0] != x.shape[0]:
        raise invalid(f"{prefix}targets", owner, f"of length {x.shape[0]} like the features", y.shape[0])
    return frozen_view(x), frozen_view(y), num_classes


@dataclass(frozen=True, eq=False)
class ArrayDataset:
    """Features and targets of one centralised dataset (a training or a test split).

    Attributes
    ----------
    features:
        ``(N, ...)`` float32 inputs (``(N, 64)`` digits, ``(N, 1, 28, 28)`` images...), or int64
        token ids ``(N, L)`` for text: integer features are read as token ids, so scale integer
        pixels to floats first. Held as a read-only view (no copy when the dtype already fits).
    targets:
        ``(N,)`` int64 class labels for classification, float32 values for regression.
    num_classes:
        Number of classes (labels lie in ``[0, num_classes)``); ``None`` for regression. Inferred
        as ``max(targets) + 1`` when left out for classification.
    task:
        ``"classification"`` or ``"regression"``.
    name:
        A short name used in summaries (``"digits"``, ``"mnist"``...).

    >>> import numpy as np
    >>> data = ArrayDataset(features=np.zeros((3, 2)), targets=[0, 2, 1], name="toy")
    >>> data.num_samples, data.num_classes, data.features.dtype
    (3, 3, dtype('float32'))
    """

    features: npt.NDArray[Any]
    targets: npt.NDArray[Any]
    num_classes: int | None = None
    task: Task = "classification"
    name: str = "dataset"

    def __post_init__(self) -> None:
        x, y, num_classes = check_arrays(
            self.features, self.targets, task=self.task, num_classes=self.num_classes, owner="ArrayDataset"
        )
        object.__setattr__(self, "features", x)
        object.__setattr__(self, "targets", y)
        object.__setattr__(self, "num_classes", num_classes)

    @property
    def num_samples(self) -> int:
        return int(self.features.shape[0])

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """Shape of one sample's features."""
        return tuple(int(s) for s in self.features.shape[1:])

    def take(self, indices: npt.ArrayLike, *, name: str | None = None) -> ArrayDataset:
        """The samples at ``indices`` (a copy), as a new dataset."""
        rows = np.asarray(indices, dtype=np.int64)
        if rows.ndim != 1 or (rows.size and (rows.min() < 0 or rows.max() >= self.num_samples)):
            raise invalid(
                "indices", "ArrayDataset.take", f"a 1-D array of row indices in [0, {self.num_samples})", rows
            )
        return ArrayDataset(
            features=self.features[rows],
            targets=self.targets[rows],
            num_classes=self.num_classes,
            task=self.task,
            name=self.name if name is None else name,
        )
