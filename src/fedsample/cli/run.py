"""``fedsample run``: train a federation with one sampler and one seed, print the JSON history."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fedsample.cli._app import CommandError
from fedsample.cli._inputs import build_samplers, parse_sampler_params
from fedsample.cli._output import write_text_atomic
from fedsample.data.builders import DATASETS, PARTITIONS, FederationSpec, build_federation
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
    train.add_argument("--algorithm", choices=("fedavg", "fedprox", "minibatch-sgd"), default="fedavg")
    train.add_argument("--mu", type=float, default=0.01, help="FedProx's proximal weight")
    train.add_argument("--rounds", type=int, default=50)
    train.add_argument("-m", "--num-sampled", type=int, default=5, metavar="M", help="clients per round (default 5)")
    train.add_argument("--local-steps", type=int, default=10, metavar="N")
    train.add_argument("--batch-size", type=int, default=20, metavar="B")
    train.add_argument("--lr", type=float, default=0.1, help="local learning rate eta_l (default 0.1)")
    train.add_argument("--lr-decay", type=float, default=1.0, help="per-round decay of eta_l")
    train.add_argument("--server-lr", type=float, default=1.0, help="server learning rate eta_g (default 1)")
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
    from fedsample.engine import (
        FedProx,
        ModelSpec,
        RunSpec,
        ServerSGD,
        TrainingConfig,
        make_algorithm,
        simulate,
    )

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
    algorithm = FedProx(mu=args.mu) if args.algorithm == "fedprox" else make_algorithm(args.algorithm)
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
        server=ServerSGD(lr=args.server_lr),
        backend=args.backend,
        device=args.device,
    )
    (sampler,) = build_samplers([args.sampler], parse_sampler_params(args.param))
    (result,) = simulate(data, model, [RunSpec(sampler, seed=args.seed)], config, init_seed=args.seed)
    history = result.history
    settings = {key: value for key, value in config.__dict__.items() if key not in ("algorithm", "server")}
    settings |= {
        "algorithm": algorithm.name,
        "server_lr": args.server_lr,
        "sampler": sampler.get_params() | {"name": sampler.name},
    }
    payload = {
        "federation": {"name": data.name, "num_clients": data.num_clients, "spec": spec.__dict__},
        "model": {"kind": model.kind, "input_shape": list(model.input_shape), "output_dim": model.output_dim},
        "config": settings,
        "history": history.to_dict(),
    }
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
        sys.stderr.write(
            f"fedsample run: {sampler.name}, {history.num_rounds} rounds on {data.name}: "
            f"training objective {history.train_loss[0]:.4f} -> {history.train_loss[-1]:.4f}{acc_text}\n"
        )
    return 0


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
