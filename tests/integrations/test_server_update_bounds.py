"""ServerUpdate never returns an invalid model (issue 32, item 6): weights of either sign keep BatchNorm's
buffers valid, weights that overflow the model's dtype and loaded states beyond their bounds are refused in
one line, and a refused round leaves the object as it was."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from fedsample.engine import make_server_optimizer  # noqa: E402
from fedsample.errors import FedsampleError  # noqa: E402
from fedsample.integrations import ServerUpdate  # noqa: E402


def _batchnorm_round(variances: list[float], weights: list[float]) -> dict[str, Any]:
    """One round of a Linear + BatchNorm model whose clients hold the running variances ``variances``."""
    module = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    theta = {n: t.clone() for n, t in module.state_dict().items()}
    clients = []
    for k, variance in enumerate(variances):
        client = {n: t.clone() for n, t in theta.items()}
        client["1.running_var"] = torch.full((3,), variance)
        client["1.num_batches_tracked"] = torch.tensor(10 + k)
        clients.append(client)
    return ServerUpdate(buffers=dict(module.named_buffers())).apply(theta, clients, weights)


def test_mixed_sign_weights_keep_the_running_variance_a_convex_combination() -> None:
    """The issue's case: weights (2, -1) over running variances 1 and 10 gave 2 - 10 = -8. The buffers take the
    positive weights' normalised mean (here client 0's alone), the parameters the weights as given."""
    new = _batchnorm_round([1.0, 10.0], [2.0, -1.0])
    torch.testing.assert_close(new["1.running_var"], torch.full((3,), 1.0))
    assert int(new["1.num_batches_tracked"]) == 10
    mixed = _batchnorm_round([1.0, 10.0, 4.0], [3.0, -1.5, 1.0])
    torch.testing.assert_close(mixed["1.running_var"], torch.full((3,), (3 * 1.0 + 1 * 4.0) / 4))
    assert int(mixed["1.num_batches_tracked"]) == round((3 * 10 + 1 * 12) / 4)
    assert bool((mixed["1.running_var"] > 0).all())


def test_mixed_sign_weights_move_the_parameters_as_written() -> None:
    """A control variate's weights: theta + sum_i w_i (theta_i - theta) with a negative w_i, exactly."""
    theta = {"w": np.array([1.0, 2.0])}
    clients = [{"w": np.array([3.0, 2.0])}, {"w": np.array([1.0, 5.0])}]
    new = ServerUpdate().apply(theta, clients, [1.5, -0.5])
    np.testing.assert_array_equal(new["w"], [1.0 + 1.5 * 2.0, 2.0 - 0.5 * 3.0])


def test_weights_of_1e308_are_refused_not_turned_into_nan() -> None:
    theta = {"w": np.array([1.0])}
    clients = [{"w": np.array([2.0])}, {"w": np.array([3.0])}]
    with pytest.raises(FedsampleError) as caught:
        ServerUpdate().apply(theta, clients, [1e308, 1e308])
    message = str(caught.value)
    assert caught.value.parameter == "weights"
    assert "within float64's 1.79769e+308" in message
    assert "1e+308" in message
    assert "\n" not in message


def test_a_float16_model_is_computed_in_float64_and_an_overflow_refused() -> None:
    """A float16 model's update of 1e6 used to come back as inf; a step that fits comes back exactly."""
    theta = {"w": np.array([1.0], dtype=np.float16)}
    client = {"w": np.array([2.0], dtype=np.float16)}
    with pytest.raises(FedsampleError, match=r"within float16's 65504\. Got weights up to 1e\+06") as caught:
        ServerUpdate().apply(theta, [client], [1e6])
    assert caught.value.parameter == "weights"
    # 1 + 60000 * (2 - 1) is within float16's range: computed exactly, then rounded once to float16.
    fits = ServerUpdate().apply(theta, [client], [60000.0])
    assert fits["w"].dtype == np.float16
    assert fits["w"][0] == np.float16(60001.0)
    # bfloat16 (range of float32, 8 bits of mantissa): a step beyond float32's range is refused too.
    big = {"w": torch.tensor([1e38], dtype=torch.bfloat16)}
    with pytest.raises(FedsampleError, match="within bfloat16's"):
        ServerUpdate().apply({"w": torch.tensor([0.0], dtype=torch.bfloat16)}, [big], [10.0])


def test_a_refused_round_leaves_the_optimizer_state_and_the_round_count() -> None:
    update = ServerUpdate(make_server_optimizer("fedadam", lr=0.1))
    theta = {"w": np.array([1.0, 2.0], dtype=np.float32)}
    theta = update.apply(theta, [{"w": np.array([2.0, 3.0], dtype=np.float32)}], [1.0])
    before = update.state_dict()
    with pytest.raises(FedsampleError):
        update.apply(theta, [{"w": np.array([2.0, 3.0], dtype=np.float32)}], [1e40])  # a momentum beyond float32
    after = update.state_dict()
    assert after["rounds"] == before["rounds"] == 1
    for field in ("momentum", "second_moment"):
        assert torch.equal(after["state"][field]["w"], before["state"][field]["w"])


def _saved_adam(dtype: Any = np.float32) -> dict[str, Any]:
    update = ServerUpdate(make_server_optimizer("fedadam"))
    update.apply({"w": np.array([1.0], dtype=dtype)}, [{"w": np.array([2.0], dtype=dtype)}], [1.0])
    return update.state_dict()


def test_adam_moments_of_3e38_are_refused_for_a_float16_model() -> None:
    """Moments beyond the model's dtype (float16: 65504) are no state of that model: refused at the round
    that fits them to it, in one line naming state_dict."""
    saved = _saved_adam(np.float16)
    saved["state"]["momentum"]["w"] = torch.tensor([3e38], dtype=torch.float64)
    saved["state"]["second_moment"]["w"] = torch.tensor([3e38], dtype=torch.float64)
    update = ServerUpdate(make_server_optimizer("fedadam"))
    update.load_state_dict(saved)
    with pytest.raises(FedsampleError) as caught:
        update.apply({"w": np.array([1.0], dtype=np.float16)}, [{"w": np.array([2.0], dtype=np.float16)}], [1.0])
    message = str(caught.value)
    assert caught.value.parameter == "state_dict"
    assert "'momentum' of 'w' reaching 3e+38 (beyond float16's 65504)" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("second_moment", -1.0, "'second_moment' holds names mapped to finite real tensors >= 0"),
        ("momentum", float("inf"), "'momentum' holds names mapped to finite real tensors"),
        ("steps", 10**30, "'steps' holds an int in [0, 2**53]"),
        ("steps", -1, "'steps' holds an int in [0, 2**53]"),
    ],
)
def test_loaded_moments_and_counts_out_of_bounds_are_refused_at_load(field: str, value: Any, fragment: str) -> None:
    saved = _saved_adam()
    saved["state"][field] = {"w": torch.tensor([value], dtype=torch.float64)} if field != "steps" else value
    with pytest.raises(FedsampleError) as caught:
        ServerUpdate(make_server_optimizer("fedadam")).load_state_dict(saved)
    assert caught.value.parameter == "state_dict"
    assert fragment in str(caught.value)


def test_a_round_count_of_10_30_is_refused() -> None:
    saved = {**_saved_adam(), "rounds": 10**30}
    with pytest.raises(FedsampleError, match=r"'rounds' is an int in \[0, 2\*\*53\]. Got 1000") as caught:
        ServerUpdate(make_server_optimizer("fedadam")).load_state_dict(saved)
    assert caught.value.parameter == "state_dict"


def test_a_state_it_saves_after_large_steps_loads_back() -> None:
    """What apply keeps, load_state_dict accepts: the bounds are the same (float16 model, FedAdam, a round
    whose update is large but within float16)."""
    update = ServerUpdate(make_server_optimizer("fedadam", lr=1.0))
    theta = {"w": np.array([0.0, 1.0], dtype=np.float16)}
    theta = update.apply(theta, [{"w": np.array([100.0, -100.0], dtype=np.float16)}], [300.0])
    buffer = io.BytesIO()
    torch.save(update.state_dict(), buffer)
    buffer.seek(0)
    resumed = ServerUpdate(make_server_optimizer("fedadam", lr=1.0))
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    client = [{"w": np.array([1.0, 1.0], dtype=np.float16)}]
    np.testing.assert_array_equal(resumed.apply(theta, client, [1.0])["w"], update.apply(theta, client, [1.0])["w"])


@pytest.mark.parametrize("buffers", [None, float("nan"), 3, len, object(), [None], [1.5]])
def test_buffers_that_are_not_names_are_refused_in_one_line(buffers: Any) -> None:
    """Issue 32: ServerUpdate(buffers=None), buffers=NaN or buffers=3 raised TypeError from list()."""
    with pytest.raises(FedsampleError, match="'buffers' parameter of ServerUpdate must be a name") as refused:
        ServerUpdate(buffers=buffers)
    assert "\n" not in str(refused.value)
    assert ServerUpdate(buffers="running_mean").buffers == {"running_mean"}  # the control: one name, or many
    assert ServerUpdate(buffers=("a", 2)).buffers == {"a", "2"}
