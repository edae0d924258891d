"""scripts/gpu/check_bert_feeding.py's queries and its reading of a run's sample times: CPU logic (its timings run on
a GPU only)."""

from __future__ import annotations

import numpy as np
import pytest

from code.bert.dataset import BertFeatures
from code.harness.core import SampleTimes
from scripts.gpu.check_bert_feeding import ROWS, make_query, query_batches, sample_time_gaps


@pytest.fixture(scope="module")
def features() -> BertFeatures:
    return BertFeatures.synthetic(600, seed=7)


def test_a_distinct_query_takes_each_feature_once_longest_first(features):
    batches = query_batches(features, 500, 64, loaded=600, repeats=False, sort=True)
    query = np.concatenate(batches)
    assert [len(b) for b in batches] == [64] * 7 + [52]
    assert len(np.unique(query)) == 500
    assert np.all(np.diff(features.lengths[query]) <= 0)


def test_loadgen_draws_repeat_loaded_features_and_sorting_keeps_the_draw(features):
    unsorted = np.concatenate(make_query("loadgen unsorted", features, 1000, 100, loaded=200))
    ordered = np.concatenate(make_query("loadgen sorted", features, 1000, 100, loaded=200))
    assert unsorted.max() < 200
    few = np.concatenate(make_query("loadgen unsorted", features, 100, 50, loaded=600))
    assert len(np.unique(few)) < 100  # drawn with replacement: 100 of 600 repeat some (a permutation would not)
    assert sorted(unsorted.tolist()) == sorted(ordered.tolist())
    assert np.all(np.diff(features.lengths[ordered]) <= 0)
    assert np.any(np.diff(features.lengths[unsorted]) > 0)


def test_one_feature_per_batch_repeats_one_loaded_feature(features):
    batches = make_query("one feature per batch", features, 1000, 256, loaded=50)
    assert len(batches) == 4
    assert all(len(b) == 256 and len(np.unique(b)) == 1 and b[0] < 50 for b in batches)


def test_more_distinct_samples_than_features_is_refused(features):
    with pytest.raises(ValueError, match="700 distinct samples asked of 600 features"):
        query_batches(features, 700, 64, loaded=600, repeats=False, sort=True)


def test_sample_times_give_the_batch_spacing_and_rate(tmp_path):
    # 10 batches of 100 samples of 200 tokens, completed 50 ms apart from 50 ms after the first issue; the record
    # is in no particular order (the core appends completions from several threads)
    n = 1000
    done = np.repeat(np.arange(1, 11) * 0.05, 100)
    shuffle = np.random.default_rng(0).permutation(n)
    times = SampleTimes(index=np.arange(n), issued_s=np.zeros(n), completed_s=done[shuffle], length=np.full(n, 200),
                        device=np.zeros(n, dtype=np.int32), device_names=("cuda:0",))
    path = tmp_path / "sample_times.npz"
    times.save(path)
    ROWS.clear()
    sample_time_gaps(path)
    text = "\n".join(ROWS)
    assert "1000 samples in 10 completions; first completion 50.0 ms after the first issue, last at 0.50 s" in text
    assert "samples/s over the test: 2,000; commonest batch sizes [100]" in text
    assert "completion spacing ms: median 50.0, p10 50.0, p90 50.0, max 50.0; us per token: median 2.500" in text
    assert "tokens per second over completions: 400,000; mean length 200.0" in text
