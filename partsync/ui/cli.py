"""Command line: parse, call the core, render, map errors to exit codes. Nothing else.

Shaped like HTTPie's: ``main()`` is the entry point and the only place that exits;
``raw_main()`` maps every error to an ``ExitStatus`` (and a message on stderr); ``program()`` is
the CLI without error handling. Each command parses its options, calls one core function
(``partsync.run``), renders the result and hands back the exit status the core decided.
"""

from __future__ import annotations

import logging
import sys

import click

from partsync.errors import ExitStatus, PartsyncError
from partsync.ui.cli_check import check
from partsync.ui.cli_common import (
    EXIT_CODES_HELP,
    Ctx,
    Exit,
    emit_json_error,
    reset_json_output,
    stderr,
)
from partsync.ui.cli_diff import demo, diff
from partsync.ui.cli_failback import failback
from partsync.ui.cli_offsets import offsets
from partsync.ui.cli_promote import promote
from partsync.ui.cli_status import status
from partsync.ui.cli_sync import plan, sync

__all__ = ["cli", "main", "program", "raw_main"]


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_CODES_HELP,
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    envvar="PARTSYNC_CONFIG",
    show_envvar=True,
    help="Config file (TOML). Default: ./partsync.toml if present.",
)
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
@click.version_option(package_name="partsync")
@click.pass_context
def cli(click_ctx: click.Context, config_path: str | None, verbose: int) -> None:
    """Keep Kafka topic partitions offset-identical across clusters.

    partsync copies raw record batches from source clusters into a local cluster without
    decompressing them, so every record lands at exactly the source's offset. Consumers can
    fail over between clusters without translating offsets.
    """
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    click_ctx.obj = Ctx(config_path)


for _command in (plan, sync, status, check, demo, diff, offsets, promote, failback):
    cli.add_command(_command)


def program(argv: list[str] | None) -> ExitStatus:
    """The CLI without error handling: parse, run the command, return its exit status."""
    try:
        rv = cli.main(args=argv, prog_name="partsync", standalone_mode=False)
    except Exit as e:
        return e.status
    # click returns the code of its own exits (--help, --version) instead of exiting.
    return ExitStatus(rv) if isinstance(rv, int) and rv in set(ExitStatus) else ExitStatus.OK


def raw_main(argv: list[str] | None = None) -> ExitStatus:
    """``program`` with every error mapped to an exit status and a message on stderr (and,
    under ``--json``, a JSON document on stdout)."""
    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in args
    reset_json_output()
    try:
        return program(argv)
    except PartsyncError as e:
        from rich.markup import escape

        # Escaped: messages name config tables ("[clusters.dc1]"), which are not markup.
        stderr.print(f"[bold red]partsync:[/] {escape(str(e))}", highlight=False)
        if as_json:
            emit_json_error(
                _KINDS.get(type(e).__name__, type(e).__name__), str(e), e.exit_status, **e.to_dict()
            )
        return e.exit_status
    except click.exceptions.Abort:
        stderr.print("aborted")
        if as_json:
            emit_json_error("aborted", "aborted", ExitStatus.FAILURE)
        return ExitStatus.FAILURE
    except click.ClickException as e:
        e.show()
        if as_json:
            emit_json_error("usage", e.format_message(), ExitStatus.USAGE)
        return ExitStatus.USAGE
    except KeyboardInterrupt:
        stderr.print("[bold red]partsync:[/] interrupted")
        if as_json:
            emit_json_error("interrupted", "interrupted", ExitStatus.FAILURE)
        return ExitStatus.FAILURE
    except Exception as e:  # a bug: the traceback for the report, and still one JSON document
        logging.getLogger("partsync").exception("internal error")
        if as_json:
            emit_json_error("internal", f"internal error: {e!r}", ExitStatus.FAILURE)
        return ExitStatus.FAILURE


# Error kinds in --json error documents, by exception class.
_KINDS = {
    "UsageError": "usage",
    "ConfigError": "config",
    "ClusterError": "cluster",
    "BrokerError": "cluster",
    "UnreplicatedError": "cluster",
    "TopicError": "topic",
    "GroupError": "group",
}


def main(argv: list[str] | None = None) -> None:
    """The entry point, and the only place that exits."""
    sys.exit(int(raw_main(argv)))


if __name__ == "__main__":
    main()
