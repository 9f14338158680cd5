"""The function's server answering without the function, for `make bench`: what a reconcile costs
over gRPC when no work is done.

`python -m tests.tools.echo --address HOST:PORT ANSWERS` serves RunFunction as function/server.py
does (the same server, handler and options), answering each request with the answer the
function gave to the request of the same size (ANSWERS: a marshalled dict of size to answer, made
ahead). A request's size does not change with the order its maps are written in.
"""

import argparse
import marshal
from pathlib import Path

from crossplane.function import logging

from function import server


class Echo:
    def __init__(self, answers: dict[int, bytes]) -> None:
        self._answers = answers

    def run_function_bytes(self, data: bytes, _) -> bytes:
        return self._answers[len(data)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("answers", type=Path)
    args = parser.parse_args()
    logging.configure(logging.Level.DISABLED)
    answers = marshal.loads(args.answers.read_bytes())  # noqa: S302 - written by make bench
    server.serve(Echo(answers), args.address, creds=None, insecure=True)


if __name__ == "__main__":
    main()
