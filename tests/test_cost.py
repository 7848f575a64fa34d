"""The engine's cost model: a robust line through recent (chars, seconds) samples (pure)."""

from __future__ import annotations

import random

import pytest

from voicews.core.cost import HORIZON, PRIORS, WINDOW, Cost, CostModel


def test_latency_and_what_fits_in_a_time() -> None:
    cost = Cost(fixed=0.2, per_char=0.01)
    assert cost.latency(30) == pytest.approx(0.5)
    assert cost.chars_within(0.5) == 30
    assert cost.chars_within(0.2) == 0  # the fixed part alone
    assert cost.chars_within(0.1) == -1  # not even that


def test_the_prior_holds_until_measured_and_its_slope_until_the_samples_spread() -> None:
    model = CostModel(PRIORS["kokoro"])
    assert model.estimate(0.0) == PRIORS["kokoro"]
    model.observe(5, 1.0, 0.0)  # one short segment, much slower than the prior says
    model.observe(8, 1.0, 0.0)
    per_char = PRIORS["kokoro"].per_char
    assert model.estimate(0.0).per_char == per_char  # 3 characters apart say nothing of it
    assert model.estimate(0.0).latency(8) == pytest.approx(1.0, abs=0.1)  # the fixed part moved


def test_a_line_is_recovered_and_slow_outliers_do_not_move_it() -> None:
    rng = random.Random(1)
    model = CostModel(PRIORS["piper"])
    for _ in range(WINDOW):
        chars = rng.randint(5, 120)
        seconds = (0.19 + 0.049 * chars) * rng.uniform(0.95, 1.05)
        if rng.random() < 0.1:
            seconds *= 3  # a job slowed by something else on the machine
        model.observe(chars, seconds, 0.0)
    assert model.estimate(0.0).per_char == pytest.approx(0.049, rel=0.1)
    # The fixed part is an upper quantile: above the line's by the noise (5% of up to 6 s),
    # not by the outliers (which add 0.5 to 12 s).
    assert 0.19 <= model.estimate(0.0).fixed <= 0.6


def test_the_fit_follows_the_recent_samples() -> None:
    model = CostModel(PRIORS["piper"])
    for chars in range(10, 10 + 2 * WINDOW, 2):
        model.observe(chars, 0.1 + 0.01 * chars, 0.0)  # a busy machine
    for chars in range(10, 10 + 2 * WINDOW, 2):
        model.observe(chars, 0.02 + 0.002 * chars, 0.0)  # quiet again: the old samples are gone
    assert model.estimate(0.0) == Cost(pytest.approx(0.02), pytest.approx(0.002))  # type: ignore[arg-type]


def test_neither_part_goes_below_zero() -> None:
    model = CostModel(Cost(0.1, 0.01))
    for chars, seconds in ((10, 0.5), (50, 0.3), (90, 0.1)):  # slower when shorter
        model.observe(chars, seconds, 0.0)
    assert model.estimate(0.0).per_char == 0.0
    assert model.estimate(0.0).fixed >= 0.0


def test_samples_older_than_the_horizon_no_longer_count() -> None:
    """A fit made during a burst (every inference sharing the cores) gives way to the prior
    once the burst is over, not after ``WINDOW`` more segments."""
    model = CostModel(PRIORS["piper"])
    for chars in range(10, 40):
        model.observe(chars, 0.5 + 0.02 * chars, at=chars / 10)
    assert model.estimate(4.0).fixed > PRIORS["piper"].fixed
    assert model.estimate(4.0 + HORIZON) == PRIORS["piper"]
    model.observe(20, 0.15, at=50.0)  # one recent sample: its fixed part, the prior's slope
    assert model.estimate(50.0) == Cost(pytest.approx(0.07), PRIORS["piper"].per_char)  # type: ignore[arg-type]
