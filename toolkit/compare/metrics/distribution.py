"""Distribution family: KullbackLeiblerDivergence and the StandardDeviation pair (GoldenStd, DeviceStd).

Source: Ascend CANN msaccucmp ``alg_KullbackLeiblerDivergence.py`` and ``alg_StandardDeviation.py``
(CANN 8.1.RC1). The tool prints StandardDeviation as one text cell holding the mean and std of each
side; we expose the two standard deviations as numbers.
"""

from __future__ import annotations

from .reductions import KL_EPS, PairSums
from .spec import ASCEND_DOC, ASCEND_TOOL, INFORMATIONAL, LOWER_IS_BETTER, define


def kullback_leibler_divergence(s: PairSums) -> float:
    """KL(q ‖ p) = Σ q·ln(q/p), in nats, q from device x, p from golden y: the compare tool's direction
    (msaccucmp ``alg_KullbackLeiblerDivergence.py`` sums device·ln(device/golden)), so values read from its
    result CSVs (parse-log) and ours are the same quantity under the same 0.005 line.

    Each tensor becomes a distribution in three steps: min-max normalise to [0, 1] (a constant tensor
    becomes all ones, i.e. uniform), floor every value at KL_EPS = float32 eps (1.19e-7) as the tool does
    so that log(0) never occurs, divide by the sum. Invariant to a positive affine change of either tensor
    (x → a·x + b, a > 0), so it measures the *shape* of the value distribution, not scale or offset.
    Tiny negative results from rounding are clamped to 0.
    """
    return s.kl


def golden_std(s: PairSums) -> float:
    """Population standard deviation (ddof = 0) of the golden tensor y."""
    return s.std_y


def device_std(s: PairSums) -> float:
    """Population standard deviation (ddof = 0) of the device tensor x."""
    return s.std_x


SPECS = (
    define("KullbackLeiblerDivergence", kullback_leibler_divergence, family="kl", direction=LOWER_IS_BETTER,
           default_threshold=0.005,
           formula=f"Σ q·ln(q/p); q, p = sum-normalised max(minmax(x|y), {KL_EPS:.3g}) (device x first)", unit="nats, [0, inf)",
           source=f"{ASCEND_TOOL.format('KullbackLeiblerDivergence')}; {ASCEND_DOC}"),
    define("GoldenStd", golden_std, family="std", direction=INFORMATIONAL,
           formula="sqrt(Σ(y − ȳ)² / n)", unit="tensor units",
           source=f"{ASCEND_TOOL.format('StandardDeviation')} (golden half); {ASCEND_DOC}"),
    define("DeviceStd", device_std, family="std", direction=INFORMATIONAL,
           formula="sqrt(Σ(x − x̄)² / n)", unit="tensor units",
           source=f"{ASCEND_TOOL.format('StandardDeviation')} (device half); {ASCEND_DOC}"),
)
