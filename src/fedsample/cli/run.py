"""``fedsample run``: train a federation with one sampler and one seed, print the JSON history."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from fedsample.cli._app import CommandError
from fedsample.cli._inputs import build_samplers, parse_sampler_params
from fedsample.cli._output import write_text_atomic
from fedsample.data.builders import DATASETS, PARTITIONS, FederationSpec, build_federation
from fedsample.engine.algorithms import ALGORITHMS
from fedsample.engine.server import SERVER_OPTIMIZERS
from fedsample.federation import BUILTIN_FEDERATIONS
from fedsample.samplers import sampler_names
from fedsample.samplers.persistence import sampler_to_dict


def register(sub: Any) -> tuple[str, Any]:
    parser = sub.add_parser(
        "run",
        help="train a federation with one sampler and print its history as JSON",
        description="Simulate federated training with one sampler and one seed and print the run's history "
        "(training objective, test metrics, distinct clients and labels, weight sums, seconds per round) as JSON. "
        "The default is a small comparison-ready federation of the embedded handwritten digits.",
    )
    data = parser.add_argument_group("federation")
    data.add_argument("--dataset", choices=DATASETS, default="digits", help="data set (default: digits, embedded)")
    data.add_argument("--data-dir", metavar="DIR", help="directory of the data files (file-backed data sets)")
    data.add_argument("--partition", choices=PARTITIONS, default="dirichlet", help="how clients get data")
    data.add_argument("--num-clients", type=int, default=50, help="number of clients (default 50)")
    data.add_argument("--alpha", type=float, default=0.5, help="Dirichlet concentration (default 0.5)")
    data.add_argument("--sizes", choices=tuple(BUILTIN_FEDERATIONS), help="built-in client sizes")
    data.add_argument("--test-fraction", type=float, default=0.2, help="test rows per client (share of its size)")
    data.add_argument("--sigma", type=float, default=1.0, help="heterogeneity of the osmd-linear data")
    train = parser.add_argument_group("training")
    train.add_argument("--model", choices=("auto", "linear", "softmax", "mlp", "cnn", "lstm"), default="auto")
    train.add_argument("--hidden", type=int, default=50, help="hidden units of the MLP (default 50)")
    train.add_argument("--algorithm", choices=tuple(ALGORITHMS), default="fedavg", help="local algorithm")
    train.add_argument("--mu", type=float, default=0.01, help="FedProx's proximal weight (default 0.01)")
    train.add_argument(
        "--algorithm-param", action="append", metavar="NAME=VALUE", help="a local-algorithm hyperparameter"
    )
    train.add_argument("--rounds", type=int, default=50)
    train.add_argument("-m", "--num-sampled", type=int, default=5, metavar="M", help="clients per round (default 5)")
    train.add_argument("--local-steps", type=int, default=10, metavar="N")
    train.add_argument("--batch-size", type=int, default=20, metavar="B")
    train.add_argument("--lr", type=float, default=0.1, help="local learning rate eta_l (default 0.1)")
    train.add_argument("--lr-decay", type=float, default=1.0, help="per-round decay of eta_l")
    train.add_argument(
        "--server", choices=tuple(SERVER_OPTIMIZERS), default="sgd", help="server optimizer (default sgd)"
    )
    train.add_argument(
        "--server-lr", type=float, default=None, help="server learning rate eta_g (default: the optimizer's)"
    )
    train.add_argument(
        "--server-param", action="append", metavar="NAME=VALUE", help="a server-optimizer hyperparameter"
    )
    train.add_argument("--importance", choices=("size", "uniform"), default="size")
    train.add_argument("--eval-every", type=int, default=1)
    train.add_argument("--backend", choices=("batched", "sequential"), default="batched")
    train.add_argument("--device", default="cpu", help="cpu (default) or cuda[:index]")
    parser.add_argument("--sampler", default="md", help=f"the sampler ({', '.join(sampler_names())})")
    parser.add_argument("--param", action="append", metavar="SAMPLER.NAME=VALUE", help="a sampler hyperparameter")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data, the model and the run (default 0)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the JSON history to FILE instead of stdout")
    parser.add_argument(
        "--save-sampler-state",
        metavar="FILE",
        help="write the sampler and its final state to FILE (read by fedsample stats --sampler-state)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no summary line on stderr")
    return "run", run


def run(args: argparse.Namespace) -> int:
    from fedsample.engine import ModelSpec, RunSpec, TrainingConfig, make_algorithm, make_server_optimizer, simulate

    if args.seed < 0:
        raise CommandError(
            f"The '--seed' parameter must be a non-negative int. Got {args.seed} instead.", parameter="--seed"
        )
    spec = FederationSpec(
        dataset=args.dataset,
        partition="natural" if args.dataset in ("osmd-linear", "shakespeare", "femnist") else args.partition,
        num_clients=args.num_clients,
        alpha=args.alpha,
        sizes=args.sizes,
        test_fraction=args.test_fraction,
        sigma=args.sigma,
        path=args.data_dir,
        seed=args.seed,
    )
    data = build_federation(spec)
    model = ModelSpec(
        kind=_model_kind(args.model, data),
        input_shape=data.sample_shape,
        output_dim=int(data.num_classes or 1),
        hidden=args.hidden,
        bias=args.dataset != "osmd-linear",
        zero_init=args.dataset == "osmd-linear",
    )
    algorithm_params = _key_values(args.algorithm_param, "--algorithm-param")
    if args.algorithm == "fedprox":
        algorithm_params.setdefault("mu", args.mu)
    algorithm = make_algorithm(args.algorithm, **algorithm_params)
    server_params = _key_values(args.server_param, "--server-param")
    if args.server_lr is not None:
        server_params["lr"] = args.server_lr
    server = make_server_optimizer(args.server, **server_params)
    config = TrainingConfig(
        rounds=args.rounds,
        num_sampled=args.num_sampled,
        local_steps=args.local_steps,
        batch_size=args.batch_size,
        local_lr=args.lr,
        lr_decay=args.lr_decay,
        eval_every=args.eval_every,
        importance=args.importance,
        algorithm=algorithm,
        server=server,
        backend=args.backend,
        device=args.device,
    )
    (sampler,) = build_samplers([args.sampler], parse_sampler_params(args.param))
    (result,) = simulate(data, model, [RunSpec(sampler, seed=args.seed)], config, init_seed=args.seed)
    history = result.history
    settings = {key: value for key, value in config.__dict__.items() if key not in ("algorithm", "server")}
    settings |= {
        "algorithm": {"name": algorithm.name} | _fields(algorithm),
        "server": {"name": server.name} | _fields(server),
        "sampler": sampler.get_params() | {"name": sampler.name},
    }
    payload = {
        "federation": {"name": data.name, "num_clients": data.num_clients, "spec": spec.__dict__},
        "model": {"kind": model.kind, "input_shape": list(model.input_shape), "output_dim": model.output_dim},
        "config": settings,
        "history": history.to_dict(),
    }
    report = getattr(sampler, "privacy", None)
    privacy = report(result.sampler_state) if report is not None else None
    if privacy is not None:
        payload["privacy"] = privacy.to_dict()
    if args.save_sampler_state:
        write_text_atomic(
            args.save_sampler_state,
            json.dumps(sampler_to_dict(sampler, result.sampler_state), allow_nan=False),
            parameter="--save-sampler-state",
        )
    text = json.dumps(payload, allow_nan=False, default=str)
    if args.output:
        write_text_atomic(args.output, text + "\n")
    else:
        print(text)
    if not args.quiet:
        acc = history.test_accuracy[-1]
        acc_text = "" if acc != acc else f", test accuracy {acc:.3f}"  # NaN for regression
        if privacy is not None:
            acc_text += (
                f", size-query epsilon {privacy.epsilon_per_round:.3g} per round, "
                f"{privacy.basic_composition:.3g} composed over {privacy.rounds} rounds"
                if privacy.private
                else ", size query not private (alpha = 1)"
            )
        sys.stderr.write(
            f"fedsample run: {sampler.name}, {history.num_rounds} rounds on {data.name}: "
            f"training objective {history.train_loss[0]:.4f} -> {history.train_loss[-1]:.4f}{acc_text}\n"
        )
    return 0


def _key_values(items: list[str] | None, parameter: str) -> dict[str, Any]:
    """``["beta=0.9", "nesterov=true"]`` into ``{"beta": 0.9, "nesterov": True}`` (values read as JSON)."""
    values: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise CommandError(
                f"The '{parameter}' parameter must look like NAME=VALUE. Got {item!r} instead.", parameter=parameter
            )
        try:
            values[key] = json.loads(raw)
        except json.JSONDecodeError:
            values[key] = raw
    return values


def _fields(component: Any) -> dict[str, Any]:
    """The dataclass fields of an algorithm or server optimizer, for the run's recorded settings."""
    return {f.name: getattr(component, f.name) for f in dataclasses.fields(component) if f.name != "name"}


def _model_kind(requested: str, data: Any) -> Any:
    if requested != "auto":
        return requested
    if data.task == "regression":
        return "linear"
    if len(data.sample_shape) == 3:
        return "cnn"
    if data.train_features.dtype.kind == "i":
        return "lstm"
    return "mlp"
