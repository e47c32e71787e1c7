"""The one reader of KEY=VALUE items (``fedsample._keyvalue``), shared by --set, --param,
--algorithm-param and --server-param."""

from __future__ import annotations

import math

import pytest

from fedsample._keyvalue import DOTTED_KEY, SAMPLER_KEY, parse_key_value, read_value
from fedsample.errors import FedsampleError


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("3", 3),
        ("0.5", 0.5),
        ("1e-3", 1e-3),
        ("true", True),
        ('"x y"', "x y"),
        ("[0, 1]", [0, 1]),
        ("null", None),  # JSON only
        ('{"a": 1}', {"a": 1}),  # JSON only
        ("md", "md"),
        ("cuda:0", "cuda:0"),
        ("2024-01-01", "2024-01-01"),  # a TOML date stays text
        ("1\nname = 2", "1\nname = 2"),  # never more than one value
        ("", ""),
    ],
)
def test_read_value(raw: str, expected: object) -> None:
    value = read_value(raw)
    assert value == expected
    assert type(value) is type(expected)


def test_read_value_non_finite() -> None:
    assert math.isinf(float(read_value("inf")))  # type: ignore[arg-type]
    assert math.isnan(float(read_value("NaN")))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "kwargs", "expected"),
    [
        (" mu = 0.1 ", {}, ("mu", 0.1)),
        ("a=b=c", {}, ("a", "b=c")),
        ("samplers[1].eta=0.5", {"key": DOTTED_KEY}, ("samplers[1].eta", 0.5)),
        ("osmd (eta 0.1).eta=0.2", {"key": SAMPLER_KEY}, ("osmd (eta 0.1).eta", 0.2)),
    ],
)
def test_parse_key_value(text: str, kwargs: dict[str, object], expected: tuple[str, object]) -> None:
    assert parse_key_value(text, flag="--x", **kwargs) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "flag", "form", "key"),
    [
        ("mu", "--algorithm-param", "NAME", None),
        ("=1", "--server-param", "NAME", None),
        ("a.b=1", "--server-param", "NAME", None),
        ("poisson=1", "--param", "SAMPLER.NAME", SAMPLER_KEY),
        ("poisson.=1", "--param", "SAMPLER.NAME", SAMPLER_KEY),
        (".capped=1", "--param", "SAMPLER.NAME", SAMPLER_KEY),
        ("x[a]=1", "--set", "KEY", DOTTED_KEY),
        ("training.=3", "--set", "KEY", DOTTED_KEY),
    ],
)
def test_malformed_items_name_flag_form_and_item(text: str, flag: str, form: str, key: object) -> None:
    kwargs = {} if key is None else {"key": key}
    with pytest.raises(FedsampleError) as info:
        parse_key_value(text, flag=flag, form=form, **kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert message == f"The {flag!r} parameter must look like {form}=VALUE. Got {text!r} instead."
    assert info.value.parameter == flag
