"""Each method's measured bias in a run's report (issue 15 item 6): ``[report] measure_bias = true``
writes ``bias.json`` (Monte Carlo on a fixed feedback sequence) and report.md shows a row per sampler."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from fedsample.experiments.config.reading import config_from_dict, config_to_dict
from fedsample.experiments.presets.catalogue import preset_configs
from fedsample.experiments.progress import ProgressLine
from fedsample.experiments.results.bias import BIAS_FILE, bias_markdown, measure_bias
from fedsample.experiments.results.report import REPORT_NAME
from fedsample.experiments.runner import run_experiment
from fedsample.federation import Federation
from fedsample.samplers import make_sampler

pytest.importorskip("torch")


def test_the_selection_systems_report_has_a_bias_row_per_method(tmp_path: Path) -> None:
    """The quick preset, cut to 2 rounds, 1 seed and 20 clients (the bias step is what is tested)."""
    ((_, config),) = preset_configs("selection-systems")
    assert config.report.measure_bias
    data = config_to_dict(config)
    data["seeds"] = [0]
    data["federation"]["num_clients"] = 20
    data["training"]["rounds"] = 2
    data["run"]["checkpoint_every"] = 0
    outcome = run_experiment(config_from_dict(data), tmp_path / "run", progress=ProgressLine(stream=io.StringIO()))
    payload = json.loads((outcome.run_dir / BIAS_FILE).read_text())
    rows = {row["label"]: row for row in payload["samplers"]}
    assert list(rows) == [entry.label for entry in config.samplers]
    for name in ("oort", "power-of-choice", "divfl"):  # biased by design, and measured so
        biased = [row for row in rows.values() if row["sampler"] == name]
        assert len(biased) == (2 if name == "power-of-choice" else 1)  # rpow-d and pow-d
        for row in biased:
            assert row["declared_biased"]
            assert row["detected"]
    md = rows["MD (random, by size)"]
    assert not md["declared_biased"]
    assert not md["detected"]
    assert md["max_bias"] < 5 * md["stderr"]
    report = (outcome.run_dir / REPORT_NAME).read_text()
    section = report.split("## Bias", 1)[1].split("\n## ", 1)[0]
    for entry in config.samplers:
        assert f"| {entry.label} | {entry.name} |" in section
    assert "± SE" in section
    assert f"{payload['monte_carlo_rounds']} draws" in section


def test_a_run_without_the_flag_has_no_bias_section(tmp_path: Path) -> None:
    data = {
        "name": "plain",
        "federation": {"dataset": "osmd-linear", "num_clients": 8, "seed": 1},
        "algorithm": {"name": "minibatch-sgd"},
        "training": {"rounds": 1, "num_sampled": 2, "local_steps": 1, "batch_size": 5},
        "samplers": [{"name": "md"}],
        "run": {"checkpoint_every": 0},
    }
    outcome = run_experiment(config_from_dict(data), tmp_path / "run", progress=ProgressLine(stream=io.StringIO()))
    assert not (outcome.run_dir / BIAS_FILE).exists()
    assert "## Bias" not in (outcome.run_dir / REPORT_NAME).read_text()


def test_the_measurement_is_fixed_and_separates_biased_from_unbiased_samplers() -> None:
    federation = Federation.from_sizes(np.arange(1, 31) * 3)
    samplers = [("md", make_sampler("md")), ("oort", make_sampler("oort"))]
    first = measure_bias(samplers, federation, 4, monte_carlo_rounds=1000)
    assert first == measure_bias(samplers, federation, 4, monte_carlo_rounds=1000)  # seeded: the same numbers
    md, oort = first["samplers"]
    assert md["max_z"] < 5 < oort["max_z"]
    assert oort["max_bias"] > 10 * oort["stderr"]


def test_the_section_writes_unknown_z_as_infinity_and_refuses_a_malformed_file() -> None:
    row = {"label": "a|b", "sampler": "oort", "declared_biased": True, "max_bias": 0.5, "stderr": 0.0}
    payload = {"monte_carlo_rounds": 10, "feedback_rounds": 2, "samplers": [{**row, "max_z": None, "detected": True}]}
    text = "\n".join(bias_markdown(payload))
    assert "| a\\|b | oort | yes | 0.5 | 0 |" in text
    assert "| ∞ | yes |" in text
    assert "does not hold a measured bias" in "\n".join(bias_markdown([1, 2]))


def test_a_two_phase_sampler_is_measured_over_whole_rounds() -> None:
    """Optimal sampling with K candidates is unbiased only over its candidate draw (two-stage
    Horvitz-Thompson): measured round by round, candidates redrawn each time, no bias shows; at a fixed
    set of candidates it would (the clients outside it weigh 0). pow-d's highest-loss rule is biased
    towards the high ids whose fixed losses are highest. Thresholds: z > 5 (a false alarm below 1e-5
    per client); 2000 draws, fixed seeds."""
    federation = Federation.from_sizes(np.random.default_rng(0).integers(10, 200, 30))
    samplers = [
        ("optimal, K = 10", make_sampler("optimal", mode="protocol", candidates=10)),
        ("pow-d", make_sampler("power-of-choice", variant="pow-d")),
    ]
    rows = {row["label"]: row for row in measure_bias(samplers, federation, 4)["samplers"]}
    optimal, pow_d = rows["optimal, K = 10"], rows["pow-d"]
    assert not optimal["declared_biased"]
    assert not optimal["detected"]
    assert optimal["max_z"] < 5
    assert pow_d["declared_biased"]
    assert pow_d["detected"]
    assert pow_d["max_bias"] > 10 * pow_d["stderr"]
    assert pow_d["client"] >= 20  # a high-loss client is favoured
