"""Without Flower, every module of the integration fails with the one error that names the extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

MODULES = [
    "flower",
    "flower_aggregate",
    "flower_client",
    "flower_fedsampling",
    "flower_feedback",
    "flower_nodes",
    "flower_replies",
    "flower_rounds",
    "flower_selection",
    "flower_two_phase",
]


@pytest.mark.parametrize("module", MODULES)
def test_missing_flower_names_the_extra(module: str) -> None:
    # A fresh interpreter in which ``import flwr`` fails, as when the extra is not installed.
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["flwr"] = None
        from fedsample.data import MissingDependencyError
        try:
            import fedsample.integrations.{module}
        except MissingDependencyError as error:
            print("error:", error)
        else:
            print("imported")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("error: ")
    assert "pip install 'fedsample[flower]'" in out
    assert out.count("\n") == 1  # one line
