"""benchmarks/_cli.py: comma lists are split, stripped, typed and checked; bad ones fail in one line."""

from __future__ import annotations

import argparse

import pytest

from benchmarks._cli import add_device_options, comma_list


def test_values_are_stripped_typed_and_checked():
    assert comma_list(int, (32, 8, 2))("32, 2,") == [32, 2]
    assert comma_list(str)("lfm1m-kgat,music-kgcn") == ["lfm1m-kgat", "music-kgcn"]


@pytest.mark.parametrize(
    ("kind", "choices", "text", "message"),
    [
        (int, (32, 2), "3", "choose from 32, 2 (got '3')"),
        (str, ("kgat",), "kgat,kgcn", "choose from kgat (got 'kgat,kgcn')"),
        (int, None, "2,x", "expected a comma-separated list (got '2,x')"),
        (int, None, ",", "expected a comma-separated list (got ',')"),
    ],
)
def test_bad_lists_are_refused(kind, choices, text: str, message: str):
    with pytest.raises(argparse.ArgumentTypeError) as error:
        comma_list(kind, choices)(text)
    assert str(error.value) == message


def test_device_options():
    parser = argparse.ArgumentParser()
    add_device_options(parser)
    args = parser.parse_args(["--device", "cpu", "--threads", "1"])
    assert (args.device, args.threads) == ("cpu", 1)
    assert (parser.parse_args([]).device, parser.parse_args([]).threads) == ("auto", None)


def test_run_checked_returns_stdout_or_names_the_failed_run():
    import sys

    from benchmarks._cli import run_checked

    assert run_checked([sys.executable, "-c", "print('ok')"], "a run") == "ok\n"
    failing = [sys.executable, "-c", "import sys; sys.exit('no such data')"]
    with pytest.raises(RuntimeError, match=r"(?s)offloaded run failed \(exit 1\):.*no such data"):
        run_checked(failing, "offloaded run")
