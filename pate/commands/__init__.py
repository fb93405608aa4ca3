"""Subcommands of the ``pate`` command (one module each; see pate.cli)."""


def add_noise_arguments(parser) -> None:
    """The aggregators' noise parameters, shared by `pate analyze` and `pate aggregate`."""
    parser.add_argument("--scale", type=float, help="LNMax: Laplace noise scale")
    parser.add_argument("--sigma", type=float, help="GNMax: Gaussian noise std")
    parser.add_argument("--threshold", type=float, help="Confident GNMax: threshold T")
    parser.add_argument("--sigma1", type=float, help="Confident GNMax: threshold-check noise std")
    parser.add_argument("--sigma2", type=float, help="Confident GNMax: argmax noise std")
