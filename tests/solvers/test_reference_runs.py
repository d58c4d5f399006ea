"""The method layer's rebuild changed nothing: seeded runs of every method replay the fixtures.

Fixtures from ``reference_runs.py`` (written before the rebuild). The update path (which block's
result was applied at which version, with which staleness) and the number of updates must be the
same; the model, the step and the objectives equal to 1e-12 relative. Not bit for bit: the last
bits of numpy's SIMD kernels and OpenBLAS's depend on the CPU (an AVX-512 machine and an AVX2 one
differ by about 1e-16 here, measured: every run of this file differed in its last bits on an
AMD EPYC with AVX-512 from fixtures written on another machine). A rule that drops a term, mixes
up staleness or the step schedule moves the model by far more than 1e-12 after 30 updates and
fails here, as does one that changes the path.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import reference_runs as ref

RTOL, ATOL = 1e-12, 1e-15  # rounding of the CPU's kernels, not behaviour (see above)


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
def test_seeded_run_replays_its_fixture(name, datasets, pinned):
    thetas, meta = pinned
    result = ref.run(name, datasets)
    np.testing.assert_allclose(result.theta, thetas[name], rtol=RTOL, atol=ATOL)
    got, want = ref.record(result), meta[name]
    assert got["path"] == want["path"]
    assert got["updates"] == want["updates"]
    for key in ("final_objective", "step", "objectives"):
        np.testing.assert_allclose(got[key], want[key], rtol=RTOL, err_msg=key)
