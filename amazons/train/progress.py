"""What a run shows while it works: its progress bars (tqdm, imported only when one is shown) and
the async pipeline's iteration clock, whose timers and metric sums the bar reads."""

from __future__ import annotations

import time
from typing import Any

from amazons.neural.learner import MetricSums
from amazons.train.pipeline import IterationLedger
from amazons.train.selfplay import SelfPlayWorkers

__all__ = ["AsyncClock", "progress_bar"]


class AsyncClock:
    """Timers and metric sums of one iteration of the async pipeline."""

    def __init__(self, workers: SelfPlayWorkers) -> None:
        self.started = time.perf_counter()
        self.sums = MetricSums()
        self.learner_seconds = 0.0
        self.learner_wait = 0.0
        self.paused_at_start = workers.paused_seconds
        self._shown = 0.0

    def show(self, bar: Any, ledger: IterationLedger) -> None:
        """Refresh the progress bar, at most once a second (the loss read waits for the device)."""
        now = time.perf_counter()
        if bar is None or now - self._shown < 1.0:
            return
        self._shown = now
        bar.n = min(ledger.games, bar.total)
        loss = self.sums.means().get("loss", float("nan"))
        bar.set_postfix(steps=ledger.steps, loss=f"{loss:.3f}",
                        pos_s=f"{ledger.positions / (now - self.started):.0f}", refresh=True)


def progress_bar(total: int, description: str, unit: str, enabled: bool) -> Any:
    """A tqdm bar of `total` `unit`s, or None when bars are off (`--no-progress`)."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit=unit, leave=False, dynamic_ncols=True)
