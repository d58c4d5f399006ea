"""The method layer's rebuild changed nothing: seeded runs of every method replay bit-identically.

Fixtures from ``reference_runs.py`` (written before the rebuild). A rule that reorders a sum, drops
a term, mixes up staleness or the step schedule changes the model's bits and fails here.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import reference_runs as ref


@pytest.fixture(scope="module")
def datasets():
    return ref.open_datasets()


@pytest.fixture(scope="module")
def pinned():
    arrays = np.load(ref.FIXTURE.with_suffix(".npz"))
    return {k: arrays[k] for k in arrays.files}, json.loads(
        ref.FIXTURE.with_suffix(".json").read_text()
    )


@pytest.mark.parametrize("name", sorted(ref.RUNS))
def test_seeded_run_is_bit_identical_to_its_fixture(name, datasets, pinned):
    thetas, meta = pinned
    result = ref.run(name, datasets)
    assert np.array_equal(result.theta, thetas[name]), (
        f"max |diff| {np.max(np.abs(result.theta - thetas[name])):.3g}"
    )
    assert ref.record(result) == meta[name]
