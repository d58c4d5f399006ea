"""The CSV conversions that docs/quickstart.md gives (and the CSV refusal points to), run as a
user would paste them: each must write a file that ``open_dataset`` reads back as the CSV's data.

(The first version of the LIBSVM recipe wrote scikit-learn's default zero-based indices, which the
reader refuses: following the tool's own instructions failed.)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from async_spark.data import clear_cache, open_dataset
from async_spark.data.dataset import CSV_HELP

QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"


def _recipes() -> list[str]:
    text = QUICKSTART.read_text()
    section = text[text.index("CSV is not read") :]
    section = section[: section.index("(with Spark:")]
    return re.findall(r"```\n(python -c .*?)\n```", section, re.S)


@pytest.fixture()
def csv_file(tmp_path):
    pd = pytest.importorskip("pandas")
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    df.insert(0, "label", y)
    df.to_csv(tmp_path / "data.csv", index=False)
    return X, y


@pytest.mark.parametrize("which", ["data.svm", "data.parquet"])
def test_the_documented_csv_conversion_gives_a_readable_dataset(tmp_path, csv_file, which):
    recipes = _recipes()
    assert len(recipes) == 2, recipes
    recipe = next(r for r in recipes if which in r)
    command = recipe.replace("\\\n", "").replace("python -c", f"{sys.executable} -c", 1)
    proc = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    clear_cache()
    source, desc = open_dataset(str(tmp_path / which), 1, standardize=False, loss="logistic")
    block = source.load(0)
    X = block.X.toarray() if hasattr(block.X, "toarray") else np.asarray(block.X)
    X_csv, y_csv = csv_file
    assert desc.n == len(y_csv) and desc.d == X_csv.shape[1]
    np.testing.assert_allclose(X, X_csv, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(desc.classes)[block.y.astype(int)], y_csv)


def test_the_csv_refusal_gives_the_same_one_based_conversion():
    assert "zero_based=False" in CSV_HELP and "dump_svmlight_file" in CSV_HELP
