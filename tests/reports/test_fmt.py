"""``reports.fmt``: the digits every table and summary line prints, pinned, so that a
change to one format shows up here and not as a drift between console, Markdown and HTML."""

from __future__ import annotations

import pytest

from reports import fmt


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "-"),
        (0.0, "0.00"),
        (1.234, "1.23"),
        (-9.999, "-10.00"),
        (12.34, "12.3"),
        (99.94, "99.9"),
        (100.0, "100"),
        (123456.7, "123,457"),
        (-250.0, "-250"),
    ],
)
def test_number(value: float | None, text: str) -> None:
    assert fmt.number(value) == text


def test_fixed_ms_percent() -> None:
    assert fmt.fixed(None) == "-"
    assert fmt.fixed(0.12345) == "0.123"
    assert fmt.fixed(1234.56, ".1f", " ms") == "1234.6 ms"
    assert fmt.fixed(42, "d") == "42"
    assert fmt.ms(1234.56) == "1,234.6 ms"
    assert fmt.ms(None) == "-"
    assert fmt.percent(0.9534) == "95.3%"
    assert fmt.percent(0.9534, 0) == "95%"
    assert fmt.percent(None) == "-"


def test_in_unit_and_signed_interval() -> None:
    assert fmt.in_unit(0.25, "fraction") == "25.0%"
    assert fmt.in_unit(1234.0, "ms") == "1,234"
    assert fmt.signed_interval(-1.25, 2300.0) == "[-1.2, +2,300.0]"
    assert fmt.signed_interval(0.5, 1.5, " ms") == "[+0.5, +1.5] ms"
