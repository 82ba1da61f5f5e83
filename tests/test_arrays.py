"""Flat layouts (tasks.arrays) against numpy's own np.unique and a Python loop."""

import numpy as np

from biasaudit.tasks.arrays import distinct_rows, ragged


def test_distinct_rows_equal_numpys_unique_of_rows():
    rng = np.random.default_rng(3)
    for columns in (1, 2, 4, 5):
        values = rng.integers(0, 4, (500, columns)).astype("float64") / 3  # many repeats
        values[::7] = -values[::7]  # negatives too: np.unique sorts them numerically
        distinct, inverse = distinct_rows(values)
        expected, expected_inverse = np.unique(values, axis=0, return_inverse=True)
        np.testing.assert_array_equal(distinct, expected)
        np.testing.assert_array_equal(inverse, expected_inverse.ravel())
        np.testing.assert_array_equal(distinct[inverse], values)
    empty, index = distinct_rows(np.zeros((0, 3)))
    assert empty.shape == (0, 3) and index.shape == (0,)


def test_ragged_lays_ranges_end_to_end():
    start, count = np.array([5, 0, 9, 2]), np.array([3, 0, 1, 4])
    expected = [v for s, c in zip(start, count) for v in range(s, s + c)]
    np.testing.assert_array_equal(ragged(start, count), expected)
