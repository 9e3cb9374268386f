"""The ``tsrnn`` command line."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tsrnn", description="Fused timescale-aware RNN kernels.")
    commands = parser.add_subparsers(dest="command", required=True)
    selftest = commands.add_parser("selftest", help="check every fused op against its reference and time both")
    selftest.add_argument("--steps", type=int, default=70, help="sequence length T (default 70)")
    selftest.add_argument("--batch", type=int, default=20, help="batch size B (default 20)")
    selftest.add_argument("--hidden", type=int, default=256, help="input and hidden size (default 256)")
    selftest.add_argument("--repeats", type=int, default=3, help="timed repeats (default 3)")
    args = parser.parse_args(argv)
    if args.command == "selftest":
        for name in ("steps", "batch", "hidden", "repeats"):
            if getattr(args, name) < 1:
                parser.error(f"--{name} must be >= 1")
        from tsrnn import selftest as st

        return st.run(args.steps, args.batch, args.hidden, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
