"""Figures: valid, non-blank PNGs; accuracy and label figures skipped for regression; one colour, line
style and marker per label across figures, integer metrics' lines shifted apart, bands inside each
metric's possible range; atomic writes; a clear error without matplotlib."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from fedsample.engine.history import History
from fedsample.errors import FedsampleError
from fedsample.experiments.results import plots
from fedsample.experiments.results.metrics import metrics_table
from fedsample.experiments.results.plots import INTEGER_OFFSET, band, line_styles, plot_metrics, rolling_mean

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ROUNDS = 12


def _history(label: str, seed: int, *, regression: bool = False) -> History:
    rng = np.random.default_rng([seed, len(label)])
    eval_rounds = np.arange(0, ROUNDS + 1, 2)
    loss = 2.0 * np.exp(-eval_rounds / 8) + 0.1 * rng.random(eval_rounds.size)
    return History(
        label=label,
        sampler=label,
        seed=seed,
        eval_rounds=eval_rounds,
        train_loss=loss,
        test_loss=loss + 0.05,
        test_accuracy=np.full(eval_rounds.size, np.nan) if regression else 1.0 - loss / 3.0,
        distinct_clients=rng.integers(3, 6, ROUNDS),
        distinct_labels=np.full(ROUNDS, -1) if regression else rng.integers(5, 10, ROUNDS),
        weight_sum=np.ones(ROUNDS),
        round_seconds=np.full(ROUNDS, 0.01),
        local_lr=np.full(ROUNDS, 0.1),
    )


def _table(*, regression: bool = False, seeds: int = 3) -> dict[str, np.ndarray]:
    return metrics_table(
        [_history(label, s, regression=regression) for label in ("md", "uniform") for s in range(seeds)]
    )


def _assert_png(path: Path) -> None:
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    pixels = matplotlib.image.imread(path)
    assert pixels.ndim == 3
    assert pixels.shape[0] > 100
    assert pixels.shape[1] > 100
    assert pixels[..., :3].var() > 1e-3  # not a blank, single-colour image


class Plotted(NamedTuple):
    directory: Path
    written: list[Path]
    figures: list[Any]


@pytest.fixture(scope="module")
def classification(tmp_path_factory: pytest.TempPathFactory) -> Plotted:
    """The figures of a two-label, three-seed classification table (drawn once: rendering dominates)."""
    directory = tmp_path_factory.mktemp("plots")
    figures: list[Any] = []
    save = plots._save

    def keep(figure: Any, path: Path) -> Path:
        figures.append(figure)
        return save(figure, path)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plots, "_save", keep)
        written = plot_metrics(_table(), directory, rolling_window=3, title="two samplers")
    return Plotted(directory, written, figures)


def test_classification_writes_four_figures(classification: Plotted) -> None:
    names = ["train_loss.png", "test_accuracy.png", "distinct_clients.png", "distinct_labels.png"]
    assert classification.written == [classification.directory / name for name in names]
    for path in classification.written:
        _assert_png(path)
    assert sorted(p.name for p in classification.directory.iterdir()) == sorted(names)  # no temporary left


def test_regression_skips_accuracy_and_labels(tmp_path: Path) -> None:
    written = plot_metrics(_table(regression=True), tmp_path)
    assert [p.name for p in written] == ["train_loss.png", "distinct_clients.png"]
    for path in written:
        _assert_png(path)


def test_figures_share_colours_and_carry_labels(classification: Plotted) -> None:
    colours: dict[str, set[tuple[float, ...]]] = {"md": set(), "uniform": set()}
    for figure in classification.figures:
        assert figure.get_suptitle() == "two samplers"
        for axes in figure.axes:
            assert axes.get_xlabel().startswith("round")
            assert axes.get_ylabel()
            assert [text.get_text() for text in axes.get_legend().get_texts()] == ["md", "uniform"]
            for line in axes.get_lines():
                colours[line.get_label()].add(tuple(line.get_color()))
    assert all(len(seen) == 1 for seen in colours.values())
    assert colours["md"] != colours["uniform"]
    train_loss, accuracy = classification.figures[:2]
    assert [axes.get_yscale() for axes in train_loss.axes] == ["log", "log"]  # every loss is positive
    assert accuracy.axes[0].get_yscale() == "linear"


def test_losses_that_are_not_all_positive_keep_a_linear_axis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures: list[Any] = []
    monkeypatch.setattr(plots, "_save", lambda figure, path: figures.append(figure) or path)
    table = dict(_table())
    table["train_loss"] = table["train_loss"] - 1.0
    plot_metrics(table, tmp_path)
    assert [axes.get_yscale() for axes in figures[0].axes] == ["linear", "linear"]


def test_rolling_mean_is_trailing_and_skips_missing_evaluations() -> None:
    values = np.array([[1.0, np.nan, 3.0, 5.0, 7.0], [np.nan] * 5])
    smoothed = rolling_mean(values, 2)
    np.testing.assert_array_equal(smoothed[0], [1.0, np.nan, 2.0, 4.0, 6.0])
    assert np.isnan(smoothed[1]).all()
    np.testing.assert_array_equal(rolling_mean(values, 100)[0], [1.0, np.nan, 2.0, 3.0, 4.0])


@pytest.mark.parametrize("window", [0, -1, 2.5, True])
def test_bad_rolling_window(tmp_path: Path, window: Any) -> None:
    with pytest.raises(FedsampleError, match="The 'rolling_window' parameter of plot_metrics"):
        plot_metrics(_table(), tmp_path, rolling_window=window)


def test_without_matplotlib_the_error_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(FedsampleError, match=r"pip install 'fedsample\[plot\]'"):
        plot_metrics(_table(), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_one_seed_and_a_failed_save_keeps_the_previous_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    written = plot_metrics(_table(regression=True, seeds=1), tmp_path, rolling_window=1)  # one seed: no bands
    assert len(written) == 2
    for path in written:
        _assert_png(path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def crash_mid_write(self: Figure, where: Path, **kwargs: Any) -> None:
        Path(where).write_bytes(PNG_SIGNATURE + b"half")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", crash_mid_write)
    with pytest.raises(FedsampleError, match="disk full"):  # one line naming the file
        plot_metrics(_table(), tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def _figures(table: dict[str, np.ndarray], directory: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    monkeypatch.setattr(plots, "_save", lambda figure, path: figures.setdefault(path.name, figure) and path)
    plot_metrics(table, directory)
    return figures


def _four_labels() -> dict[str, np.ndarray]:
    """Four labels, three of which draw 6 distinct clients every round (the issue's hidden lines)."""
    histories = []
    for k, label in enumerate(("md", "uniform", "clustered (size)", "clustered (similarity)")):
        for seed in range(3):
            history = _history(label, seed)
            distinct = np.full(ROUNDS, 4 if (k, seed) == (0, 2) else 6)
            histories.append(dataclasses.replace(history, distinct_clients=distinct))
    return metrics_table(histories)


def test_every_label_has_its_own_style_marker_and_first_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = _figures(_four_labels(), tmp_path, monkeypatch)
    looks: dict[str, set[tuple[Any, ...]]] = {}
    for figure in figures.values():
        for axes in figure.axes:
            lines = axes.get_lines()
            assert len(lines) == 4
            assert len({(line.get_linestyle(), line.get_marker()) for line in lines}) == 4
            assert len({line.get_marker() for line in lines}) == 4
            assert len({line.get_markevery()[0] for line in lines}) == 4  # markers on different points
            for line in lines:
                look = (tuple(line.get_color()), line.get_linestyle(), line.get_marker())
                looks.setdefault(line.get_label(), set()).add(look)
    assert all(len(seen) == 1 for seen in looks.values())  # one look per label in every figure
    assert len(line_styles(32)) == len({(s.linestyle, s.marker) for s in line_styles(32)})


def test_integer_metrics_are_shifted_apart_and_others_are_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = _figures(_four_labels(), tmp_path, monkeypatch)
    for name in ("distinct_clients.png", "distinct_labels.png"):
        lines = figures[name].axes[0].get_lines()
        offsets = [np.unique(np.round(line.get_xdata() - np.arange(1, ROUNDS + 1), 12)) for line in lines]
        assert all(offset.size == 1 for offset in offsets)  # one shift per line
        shifts = [float(offset[0]) for offset in offsets]
        assert shifts == sorted(shifts)
        assert len(set(shifts)) == 4
        assert max(abs(shift) for shift in shifts) == pytest.approx(INTEGER_OFFSET / 2)
    # Three labels draw 6 clients every round: the same y, told apart by x.
    lines = figures["distinct_clients.png"].axes[0].get_lines()
    assert [line.get_ydata().tolist() for line in lines[1:]] == [[6.0] * ROUNDS] * 3
    for line in figures["train_loss.png"].axes[0].get_lines():
        assert np.array_equal(line.get_xdata(), np.arange(0, ROUNDS + 1, 2))


def test_distinct_clients_band_stays_within_what_was_drawn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = _figures(_four_labels(), tmp_path, monkeypatch)
    axes = figures["distinct_clients.png"].axes[0]
    md_band = axes.collections[0]  # md's seeds draw 6, 6 and 4: mean 5.33, sd 1.15
    heights = np.concatenate([path.vertices[:, 1] for path in md_band.get_paths()])
    assert heights.max() == pytest.approx(6.0)  # mean + sd would reach 6.49, above the 6 drawn
    assert heights.min() == pytest.approx(16 / 3 - np.std([6, 6, 4], ddof=1))  # inside [4, 6]: kept
    assert axes.get_ylim()[1] < 6.3


def test_band_is_clipped_to_the_metric_s_declared_range() -> None:
    accuracy = np.array([[0.99, 0.5], [0.9, 0.1], [1.0, 0.0]])
    mean, low, high = band("test_accuracy", accuracy, "std")
    assert np.all(high <= 1.0)
    assert np.all(low >= 0.0)
    spread = np.std(accuracy, axis=0, ddof=1)
    assert (mean + spread)[0] > 1.0
    assert (mean - spread)[1] < 0.0
    loss = np.array([[0.01], [0.2], [0.02]])
    _, low, _ = band("train_loss", loss, "std")
    assert low[0] == 0.0
    negative = np.array([[-1.0], [0.5]])  # a user's loss below 0: the band keeps the data
    _, low, high = band("train_loss", negative, "range")
    assert (low[0], high[0]) == (-1.0, 0.5)
    labels = np.array([[10.0, 9.0], [10.0, 10.0], [8.0, 10.0]])
    _, _, high = band("distinct_labels", labels, "std")
    assert np.all(high <= 10.0)
