"""Command line: the SDK's standard flags (--insecure, --tls-certs-dir, --address, --debug)."""

import click
from crossplane.function import cli as sdkcli

from function.fn import FunctionRunner


@click.command()
@sdkcli.standard_options
def cli(**kwargs) -> None:
    """Serve the InferenceCluster composition function over gRPC."""
    try:
        sdkcli.run(FunctionRunner(), **kwargs)
    except (
        Exception
    ) as e:  # startup errors (bad certs dir, port taken) as one line, not a traceback
        raise click.ClickException(f"cannot run function: {e}") from e


if __name__ == "__main__":
    cli()
