"""Yoruko-Tang/FedCor's Gaussian process as released, replayed on given loss changes (issue 28, item 3).

Runs in the side environment of ``fedcor_hicsfl_env.sh fedcor`` (torch, numpy)::

    $REF/venv-fedcor/bin/python benchmarks/reference/fedcor_authors.py --input cases.json --output out.json

``src/GPR.py`` (commit ``d941083``) imports torch and numpy only: it is imported whole, unmodified.
The driver builds the process as ``src/federated_main.py`` does for the README's runs
(``Kernel_GPR(num_users, loss_type='MML', reusable_history_length=group_size, gamma=GPR_gamma,
dimension=dimension, kernel=GPR.Poly_Kernel, order=1, Normalize=False)``), sets its embedding to the
case's starting one (``Set_Parameters(proj=...)``, so that both sides start alike; the released code
draws it from torch's global generator) and replays ``federated_main.py``'s calls round by round:

* a round ``t <= warmup``: ``Update_Training_Data`` with the case's loss changes of round ``t``, and at
  ``t == warmup`` ``Train(lr=1e-2, llr=0.01, max_epoches=1000, update_mean=True)`` (the ``--update_mean``
  branch the README's commands take; the iterations are the case's);
* a round ``t > warmup`` with ``t % GPR_interval == 0``: ``Reset_Discount``, ``Update_Training_Data``
  with the round's changes and ``Train(..., max_epoches=GPR_Epoch, update_mean=True)``;
* any other round: ``Select_Clients(m, epsilon_greedy=0, weights, Dynamic=False)`` then
  ``Update_Discount(selected, discount)``.

In the released loop the refit's changes come from an extra round of randomly chosen clients trained on
a copy of the model and the round itself is chosen by the process; fedsample draws the refit round
itself at random (as the HiCS-FL authors' port of FedCor, ``server/server_fedcor.py``, does). The
changes here are given, so both sides read the same ones, and the comparison is on the rounds that
both choose by the process. A case of kind ``"select"`` calls ``Select_Clients`` once on a given
embedding and discount (no fitting).

The output holds, per case, the chosen clients of every selection round and the covariance
``Sigma = X^T X + noise^2 I`` after every fit.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
from types import ModuleType
from typing import Any

import numpy as np
import torch


def load_gpr(source_dir: pathlib.Path) -> ModuleType:
    """``src/GPR.py`` imported as it is."""
    path = source_dir / "src" / "GPR.py"
    spec = importlib.util.spec_from_file_location("released_gpr", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(gpr_module: ModuleType, case: dict[str, Any]) -> Any:
    """The README's process (linear kernel, unnormalised), its embedding set to the case's."""
    n = int(case["num_clients"])
    gpr = gpr_module.Kernel_GPR(
        n,
        loss_type="MML",
        reusable_history_length=int(case["history"]),
        gamma=float(case["gamma"]),
        device=torch.device("cpu"),
        dimension=int(case["dimension"]),
        kernel=gpr_module.Poly_Kernel,
        order=1,
        Normalize=False,
    )
    gpr.Set_Parameters(proj=torch.tensor(np.asarray(case["embedding"]), dtype=torch.get_default_dtype()))
    return gpr


def replay(gpr_module: ModuleType, case: dict[str, Any]) -> dict[str, Any]:
    """The selections and fitted covariances of one case."""
    torch.manual_seed(0)
    gpr = build(gpr_module, case)
    weights = np.asarray(case["weights"], dtype=np.float64)
    n, m = int(case["num_clients"]), int(case["num_sampled"])
    if case.get("kind") == "select":
        gpr.discount = torch.tensor(np.asarray(case["discount"]), dtype=torch.get_default_dtype())
        return {"selections": {"0": [int(c) for c in gpr.Select_Clients(m, 0.0, weights, False, 0.0)]}}
    warmup, interval = int(case["warmup"]), int(case["interval"])
    selections: dict[str, list[int]] = {}
    covariances: dict[str, list[list[float]]] = {}
    for epoch in range(int(case["rounds"])):
        selected = None
        if epoch > warmup and epoch % interval != 0:
            selected = [int(c) for c in gpr.Select_Clients(m, 0.0, weights, False, 0.0)]
            selections[str(epoch)] = selected
        if epoch <= warmup or epoch % interval == 0:
            if epoch > warmup:
                gpr.Reset_Discount()
            changes = np.asarray(case["changes"][str(epoch)], dtype=np.float64)
            gpr.Update_Training_Data([np.arange(n)], [changes], epoch=epoch)
            if epoch >= warmup:
                iterations = int(case["warmup_iterations"] if epoch == warmup else case["refit_iterations"])
                gpr.Train(lr=1e-2, llr=0.01, max_epoches=iterations, schedule_lr=False, update_mean=True, verbose=False)
                covariances[str(epoch)] = gpr.Covariance().detach().double().numpy().tolist()
        else:
            assert selected is not None
            gpr.Update_Discount(selected, float(case["discount"]))
    return {"selections": selections, "covariances": covariances}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=pathlib.Path, default=pathlib.Path("/tmp/fedsample-reference/fedcor-src"))
    parser.add_argument("--check-source", type=pathlib.Path, help="only check that GPR.py imports, then exit")
    parser.add_argument("--input", type=pathlib.Path)
    parser.add_argument("--output", type=pathlib.Path)
    parser.add_argument(
        "--double",
        action="store_true",
        help="torch's default dtype float64 (the embedding, the mean and the discounts; GPR.py casts the "
        "loss changes to float32 itself, so they stay float32)",
    )
    options = parser.parse_args(argv)
    torch.set_num_threads(1)  # the cases are small; threads only contend on a shared machine
    if options.double:
        torch.set_default_dtype(torch.float64)
    if options.check_source is not None:
        load_gpr(options.check_source)
        source = (options.check_source / "SOURCE.txt").read_text().strip()
        print(f"fedcor_authors.py: GPR.py imports ({source}); torch {torch.__version__}")
        return 0
    if options.input is None or options.output is None:
        parser.error("--input and --output are needed (or --check-source)")
    gpr_module = load_gpr(options.source)
    cases = json.loads(options.input.read_text())
    out = {"torch": torch.__version__, "cases": [replay(gpr_module, case) for case in cases]}
    options.output.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
