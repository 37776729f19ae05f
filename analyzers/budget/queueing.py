"""Queueing delay at a utilisation, and the utilisation a latency SLO allows.

M/G/1 by the Pollaczek-Khinchine formula, M/D/c by halving the M/M/c (Erlang C) wait,
a standard approximation that is exact for c = 1. Pure arithmetic: this module must not
import ``loadgen``, httpx or polars, and does no I/O.
"""

from __future__ import annotations

import math

from analyzers.errors import BudgetError


def _check(utilisation: float, service_s: float) -> None:
    if not 0 <= utilisation < 1:
        raise BudgetError(f"utilisation must be in [0, 1), got {utilisation}")
    if service_s <= 0:
        raise BudgetError(f"service time must be positive, got {service_s}")


def mg1_wait_s(utilisation: float, service_s: float, service_cv2: float = 0.0) -> float:
    """Mean wait in queue of an M/G/1 server (Pollaczek-Khinchine).

    ``W = rho x S x (1 + cv^2) / (2 (1 - rho))``; ``cv^2 = 0`` is M/D/1 (fixed service),
    ``1`` is M/M/1. ``rho = lambda x S``.
    """
    _check(utilisation, service_s)
    if service_cv2 < 0:
        raise BudgetError(f"service_cv2 must not be negative, got {service_cv2}")
    return utilisation * service_s * (1 + service_cv2) / (2 * (1 - utilisation))


def erlang_c(servers: int, utilisation: float) -> float:
    """Probability an arrival waits in an M/M/c queue with per-server utilisation ``rho``.

    ``C = (a^c / c!) / ((1 - rho) sum_{k<c} a^k / k! + a^c / c!)`` with ``a = c rho``,
    summed with a running term so large ``c`` does not overflow.
    """
    if servers < 1:
        raise BudgetError(f"servers must be at least 1, got {servers}")
    if not 0 <= utilisation < 1:
        raise BudgetError(f"utilisation must be in [0, 1), got {utilisation}")
    a = servers * utilisation
    term, total = 1.0, 1.0  # a^k / k! for k = 0
    for k in range(1, servers):
        term *= a / k
        total += term
    last = term * a / servers  # a^c / c!
    return last / ((1 - utilisation) * total + last)


def mdc_wait_s(utilisation: float, service_s: float, servers: int = 1) -> float:
    """Mean wait in queue of an M/D/c system, approximated as half the M/M/c wait.

    ``W ~ 0.5 x C(c, rho) x S / (c (1 - rho))``; for ``c = 1`` it equals M/D/1 exactly.
    """
    _check(utilisation, service_s)
    return 0.5 * erlang_c(servers, utilisation) * service_s / (servers * (1 - utilisation))


def max_utilisation(
    service_s: float, budget_s: float, *, servers: int = 1, service_cv2: float = 0.0
) -> float:
    """The highest utilisation at which ``service + mean wait <= budget`` (0 if none).

    For one server, solving P-K for rho: ``rho = 2 w / (S (1 + cv^2) + 2 w)`` with
    ``w = budget - S``. For ``c`` servers (M/D/c, ``service_cv2`` ignored) it bisects
    the wait, which grows with rho. What the SLO costs is ``1 - rho``.
    """
    if service_s <= 0:
        raise BudgetError(f"service time must be positive, got {service_s}")
    room = budget_s - service_s
    if room <= 0:
        return 0.0
    if servers == 1:
        return 2 * room / (service_s * (1 + service_cv2) + 2 * room)
    lo, hi = 0.0, 1.0 - 1e-12
    for _ in range(100):
        mid = (lo + hi) / 2
        if mdc_wait_s(mid, service_s, servers) <= room:
            lo = mid
        else:
            hi = mid
    return lo


def mdc_wait_quantile_s(
    utilisation: float, service_s: float, servers: int = 1, quantile: float = 0.99
) -> float:
    """The ``quantile`` of the wait in queue of an M/D/c system, approximated like the mean.

    M/M/c: ``P(W > t) = C(c, rho) exp(-c (1 - rho) t / S)``, so the ``q`` quantile is
    ``ln(C / (1 - q)) S / (c (1 - rho))`` (0 when ``C <= 1 - q``: that share never
    waits); halved for fixed service time, as :func:`mdc_wait_s` halves the mean.
    """
    _check(utilisation, service_s)
    if not 0 < quantile < 1:
        raise BudgetError(f"quantile must be in (0, 1), got {quantile}")
    waits = erlang_c(servers, utilisation)
    tail = 1 - quantile
    if waits <= tail:
        return 0.0
    return 0.5 * math.log(waits / tail) * service_s / (servers * (1 - utilisation))


def max_utilisation_quantile(
    service_s: float, budget_s: float, *, servers: int = 1, quantile: float = 0.99
) -> float:
    """The highest utilisation at which ``service + wait quantile <= budget`` (0 if none):
    the ``quantile`` analogue of :func:`max_utilisation`, by bisection (the wait grows
    with rho)."""
    if service_s <= 0:
        raise BudgetError(f"service time must be positive, got {service_s}")
    room = budget_s - service_s
    if room <= 0:
        return 0.0
    lo, hi = 0.0, 1.0 - 1e-12
    for _ in range(100):
        mid = (lo + hi) / 2
        if mdc_wait_quantile_s(mid, service_s, servers, quantile) <= room:
            lo = mid
        else:
            hi = mid
    return lo


def littles_law_in_flight(rate_per_s: float, duration_s: float) -> float:
    """Mean number in the system: ``L = lambda x W``."""
    if rate_per_s < 0 or duration_s < 0 or math.isnan(rate_per_s + duration_s):
        raise BudgetError("rate and duration must not be negative")
    return rate_per_s * duration_s
