"""Command line: the SDK's standard flags (--insecure, --tls-certs-dir, --address, --debug, the
message size limits) and the caches' budget (--cache-mib), served by function/server.py."""

import click
from crossplane.function import cli as sdkcli
from crossplane.function import logging, runtime

from function import caches, server
from function.fn import FunctionRunner

MIB = 1024 * 1024


@click.command()
@sdkcli.standard_options
@click.option(
    "--cache-mib",
    type=click.IntRange(min=0),
    default=caches.DEFAULT_BUDGET_MIB,
    show_default=True,
    envvar=caches.BUDGET_ENV,
    show_envvar=True,
    help="MiB every cache together may hold (what is kept between calls for speed): about 0.85 "
    "MiB per cluster of the largest shape, 0.3 MiB per small one. Past it, what was used longest "
    "ago is made afresh when next needed.",
)
def cli(
    *,
    cache_mib: int,
    debug: bool,
    address: str,
    tls_certs_dir: str | None,
    insecure: bool,
    max_recv_message_size: int,
    max_send_message_size: int | None,
) -> None:
    """Serve the InferenceCluster composition function over gRPC."""
    logging.configure(level=logging.Level.DEBUG if debug else logging.Level.INFO)
    caches.STORE.budget = cache_mib * caches.MIB
    send = max_send_message_size or max_recv_message_size
    try:
        server.serve(
            FunctionRunner(),
            address,
            creds=runtime.load_credentials(tls_certs_dir),
            insecure=insecure,
            options=[
                ("grpc.max_receive_message_length", max_recv_message_size * MIB),
                ("grpc.max_send_message_length", send * MIB),
            ],
        )
    except (
        Exception
    ) as e:  # startup errors (bad certs dir, port taken) as one line, not a traceback
        raise click.ClickException(f"cannot run function: {e}") from e


if __name__ == "__main__":
    cli()
