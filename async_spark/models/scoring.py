"""Held-out metrics of a saved linear model (``model.npz``, raw-scale weights), block by block.

``model.npz`` (:func:`async_spark.solvers.outputs.write_run`) holds ``weights`` (``(d,)``, or
``(K, d)`` for softmax), ``intercept`` and ``classes`` (the label value of each class index; empty
for least squares), as plain arrays. Its loss follows from them: no classes is ``squares``, one
weight row with two classes ``logistic``, K rows ``softmax``. :class:`HeldOutScores` adds blocks
of rows with their *raw* labels and reports, for a classifier, the accuracy, the mean of the
training loss (log loss, natural logarithm: the objective's data term, computed by the same
functions) and for two classes the area under the ROC curve; for least squares the RMSE, the MAE
and R². The ROC area keeps one score per row (8 bytes each); everything else is sums.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .linear import LinearModel, loss_values, margins, pack_params

__all__ = ["HeldOutScores", "SavedLinearModel", "read_saved_model"]

MODEL_FILE = "model.npz"


class SavedLinearModel(NamedTuple):
    """A model read back from ``model.npz``: ``theta`` in ``model``'s layout, and the label value
    of each class index (``()`` for least squares)."""

    model: LinearModel
    theta: np.ndarray
    classes: tuple[float, ...]
    path: Path


def read_saved_model(path: str | Path) -> SavedLinearModel:
    """Read ``path`` (a ``model.npz``, or a run folder holding one) without pickle.

    Raises
    ------
    ValueError
        A file that is missing, not a ``.npz`` of plain arrays, or whose arrays do not make a
        linear model (shapes that disagree, values that are not finite); the message names it.
    """
    path = Path(path)
    if path.is_dir():
        runs = sorted(p.parent.name for p in path.glob(f"*/{MODEL_FILE}"))
        if runs and not (path / MODEL_FILE).is_file():  # train --method a,b --out DIR
            raise ValueError(
                f"{path}: holds the runs {', '.join(runs)}; name one, e.g. {path / runs[0]}"
            )
        path = path / MODEL_FILE
    if not path.is_file():
        raise ValueError(f"{path}: no such model file (train --out DIR writes DIR/{MODEL_FILE})")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: np.asarray(z[k]) for k in z.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"{path}: not a model.npz of plain arrays ({exc})") from None
    missing = {"weights", "intercept", "classes"} - set(arrays)
    if missing:
        raise ValueError(f"{path}: missing array(s) {', '.join(sorted(missing))}")
    weights, intercept = arrays["weights"], arrays["intercept"]
    classes = tuple(float(c) for c in np.ravel(arrays["classes"]))
    if not all(a.dtype.kind in "fiu" for a in (weights, intercept, arrays["classes"])):
        raise ValueError(f"{path}: weights, intercept and classes must be numeric arrays")
    W = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    b = np.ravel(np.asarray(intercept, dtype=np.float64))
    K, d = W.shape
    if weights.ndim not in (1, 2) or d < 1 or b.size != K:
        raise ValueError(
            f"{path}: weights of shape {weights.shape} and intercept of shape "
            f"{intercept.shape} do not make a linear model"
        )
    if not (np.isfinite(W).all() and np.isfinite(b).all()):
        raise ValueError(f"{path}: the weights or the intercept are not finite")
    if np.any(np.diff(classes) <= 0):
        raise ValueError(f"{path}: classes must be distinct and increasing, got {classes[:10]}")
    if not classes and weights.ndim == 1:
        loss, num_classes = "squares", None
    elif weights.ndim == 1 and len(classes) == 2:
        loss, num_classes = "logistic", None
    elif weights.ndim == 2 and len(classes) == K >= 2:
        loss, num_classes = "softmax", K
    else:
        raise ValueError(
            f"{path}: {len(classes)} classes do not match weights of shape {weights.shape} (one "
            "row with no class: least squares; one row, 2 classes: logistic; K rows, K classes: "
            "softmax)"
        )
    model = LinearModel(loss=loss, num_features=d, num_classes=num_classes)
    theta = pack_params(model, W if loss == "softmax" else W[0], b if K > 1 else b[0])
    return SavedLinearModel(model, theta, classes, path)


class HeldOutScores:
    """The metrics of ``saved`` over the blocks given to :meth:`add`, in any order."""

    def __init__(self, saved: SavedLinearModel) -> None:
        self.saved = saved
        self.rows = 0
        self._loss_sum = 0.0
        self._correct = 0
        self._abs_sum = 0.0
        # the labels' sums about the first block's mean: exact R² for targets far from 0
        self._y_shift: float | None = None
        self._y_sum = 0.0
        self._y_sq_sum = 0.0
        self._scores: list[np.ndarray] = []  # two classes: margins and labels, for the ROC area
        self._positive: list[np.ndarray] = []

    def add(self, X: Any, y: np.ndarray, where: str, first_row: int = 0) -> None:
        """Score the rows ``X`` with raw labels ``y``; ``where`` and ``first_row`` (0-based row
        of the data where the block starts) name a label the model does not know."""
        model, theta = self.saved.model, self.saved.theta
        y = np.asarray(y, dtype=np.float64)
        z = margins(model, X, theta)
        if model.loss == "squares":
            residual = z - y
            self._loss_sum += float(loss_values(model, z, y).sum())
            self._abs_sum += float(np.abs(residual).sum())
            if self._y_shift is None and y.size:
                self._y_shift = float(y.mean())
            centered = y - (self._y_shift or 0.0)
            self._y_sum += float(centered.sum())
            self._y_sq_sum += float(np.dot(centered, centered))
        else:
            index = self._class_index(y, where, first_row)
            self._loss_sum += float(loss_values(model, z, index.astype(np.float64)).sum())
            predicted = np.argmax(z, axis=1) if model.loss == "softmax" else (z > 0).astype(int)
            self._correct += int(np.count_nonzero(predicted == index))
            if model.loss == "logistic":
                self._scores.append(np.asarray(z, dtype=np.float64))
                self._positive.append(index == 1)
        self.rows += int(y.shape[0])

    def _class_index(self, y: np.ndarray, where: str, first_row: int) -> np.ndarray:
        classes = np.asarray(self.saved.classes)
        index = np.searchsorted(classes, y).clip(0, classes.size - 1)
        unknown = classes[index] != y
        if unknown.any():
            i = int(np.flatnonzero(unknown)[0])
            shown = ", ".join(f"{c:g}" for c in classes[:10]) + (
                ", ..." if classes.size > 10 else ""
            )
            raise ValueError(
                f"{where}: row {first_row + i + 1} has label {y[i]:g}, not one of the model's "
                f"classes ({shown})"
            )
        return index

    def metrics(self) -> dict[str, Any]:
        """``rows`` and the metrics of the loss (see the module docstring); a metric that is not
        defined on these rows (no rows; one class only for the ROC area) is None."""
        n = self.rows
        out: dict[str, Any] = {"rows": n, "loss": self.saved.model.loss}
        if self.saved.model.loss == "squares":
            sse = 2.0 * self._loss_sum  # the loss is half the squared residual
            sst = self._y_sq_sum - self._y_sum**2 / n if n else 0.0
            out["rmse"] = float(np.sqrt(sse / n)) if n else None
            out["mae"] = self._abs_sum / n if n else None
            out["r2"] = 1.0 - sse / sst if n and sst > 0 else None
            return out
        out["accuracy"] = self._correct / n if n else None
        out["log_loss"] = self._loss_sum / n if n else None
        if self.saved.model.loss == "logistic":
            out["auc"] = _roc_area(self._scores, self._positive)
        return out


def _roc_area(scores: list[np.ndarray], positive: list[np.ndarray]) -> float | None:
    """The area under the ROC curve: the Mann-Whitney statistic, ties counted half."""
    if not scores:
        return None
    s, pos = np.concatenate(scores), np.concatenate(positive)
    n1 = int(np.count_nonzero(pos))
    n0 = pos.size - n1
    if n1 == 0 or n0 == 0:
        return None
    from scipy.stats import (
        rankdata,
    )  # (here: scipy.stats takes a while to import, on executors too)

    ranks = rankdata(s)  # average ranks: a tie between the classes counts one half
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))
