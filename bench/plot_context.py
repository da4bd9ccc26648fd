"""What every figure's title says: the run's parameters and its SLO."""

from __future__ import annotations

from dataclasses import dataclass

from bench.metrics import Slo


@dataclass(frozen=True, slots=True)
class PlotContext:
    parameters: str  # one line: target, arrivals, request count, input and output sizes
    slo: Slo

    def slo_text(self) -> str:
        parts = [
            f"{name} <= {value:g} ms"
            for name, value in (("TTFT", self.slo.ttft_ms), ("TPOT", self.slo.tpot_ms), ("e2e", self.slo.e2e_ms))
            if value is not None
        ]
        return "SLO: " + (", ".join(parts) if parts else "none given")

    def title(self, what: str) -> str:
        return f"{what}\n{self.parameters}\n{self.slo_text()}"
