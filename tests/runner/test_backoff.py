"""The pause between the tries of a job worker (or the engine's listener) that keeps stopping."""

from __future__ import annotations

from looping_core.runner._patience import Backoff


def test_the_pause_doubles_up_to_its_most_and_starts_over_after_a_long_try() -> None:
    backoff = Backoff(0.5, 4.0)
    assert [backoff.pause(0.1) for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff.pause(4.0) == 4.0  # as long as the most: still failing fast
    assert backoff.pause(4.1) == 0.5  # it had been working: from the first pause again
    assert backoff.pause(0.0) == 1.0
