"""The ``featurecache`` command line. Commands only translate arguments into one library call.

Exit statuses (documented in each command's --help and in README):
  0  success;  1  some inputs failed (`build`; see `featurecache info STORE` / index/failures.arrow);
  2  usage error: an invalid argument or option (click's own, a UsageError, `show`'s unknown id);
  3  fatal error (e.g. the output cannot be written, the store is unreadable, the command's extra is not
     installed);
  4  `verify` found a mismatch, or something it could not check;  130  Ctrl-C (`build`, `train`);
     143  SIGTERM (`build`, `train`, `serve`, `verify`).

Streams: what a command reports as its result (tables, JSON, summaries, verify's MISMATCH and
UNCHECKED lines) goes to stdout; log lines, progress bars, warnings and errors to stderr.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import logging
import os
import shlex
import sys
from collections.abc import Collection
from pathlib import Path, PurePath
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from featurecache.errors import FeatureCacheError, NotFound, StoreError, UsageError
from featurecache.text import first_named

EXIT_OK = 0
EXIT_INPUT_FAILURES = 1
EXIT_USAGE = 2
EXIT_FATAL = 3
EXIT_VERIFY_MISMATCH = 4

#: the error handler :func:`_degrade_output` gives stdout and stderr
DISPLAY_ERRORS = "featurecache-display"


def _display_errors(exc: UnicodeError) -> tuple[str | bytes, int]:
    """A character the stream's encoding lacks: a file name's undecodable byte (a surrogate, as
    ``surrogateescape`` gives it) goes out as that byte, as ``ls`` shows the name; any other
    character as its backslash escape (``\\u2192``)."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start : exc.end]
    if all("\udc80" <= c <= "\udcff" for c in text):
        return bytes(ord(c) - 0xDC00 for c in text), exc.end
    return codecs.backslashreplace_errors(exc)


def _degrade_output() -> list[tuple[io.TextIOWrapper, str]]:
    """stdout and stderr escape a character their encoding cannot write instead of raising: with
    ``PYTHONIOENCODING=ascii``, an ASCII or Latin-1 locale, a successful build crashed printing
    the ``→`` of its summary (exit 1: "some inputs failed") and ``show`` on ``…`` (review R38a
    s50 #6). Only a stream that would raise (``strict``, or ``surrogateescape``, which the C locale
    gives stdout) is changed. Returns each stream changed with its handler before, for
    :func:`_restore_output`."""
    codecs.register_error(DISPLAY_ERRORS, _display_errors)
    changed = []
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors in ("strict", "surrogateescape"):
            with contextlib.suppress(ValueError, OSError, io.UnsupportedOperation):
                before = stream.errors
                stream.reconfigure(errors=DISPLAY_ERRORS)
                changed.append((stream, before))
    return changed


def _restore_output(changed: list[tuple[io.TextIOWrapper, str]]) -> None:
    """Each stream :func:`_degrade_output` changed gets its handler back, unless something else set
    another since: ``app()`` called from a program leaves that program's output as it was (review
    R39a s50 #6: its own print of a lone surrogate wrote a raw byte instead of raising)."""
    for stream, before in changed:
        if stream.errors == DISPLAY_ERRORS:
            with contextlib.suppress(ValueError, OSError, io.UnsupportedOperation):
                stream.reconfigure(errors=before)


class _Group(TyperGroup):
    """The app's group: every run (a command, ``--help``, ``--version``) gets output that cannot
    fail on its characters (:func:`_degrade_output`), until it returns or raises."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        changed = _degrade_output()
        try:
            return super().main(*args, **kwargs)
        finally:
            _restore_output(changed)


#: ``ctx.meta`` key of the command line's text of each parameter, by its name (:meth:`_Command.make_parser`)
TYPED = "featurecache.typed"


class _Command(TyperCommand):
    """Every command: its arguments parsed, it first leaves a working directory that no longer
    exists (:func:`_leave_deleted_cwd`)."""

    def make_parser(self, ctx: Any) -> Any:
        """The parser, which also keeps the text of each value as the command line gave it, before
        click converts it (``ctx.meta[TYPED]``): a path's ``./`` is gone from its ``Path``."""
        parser = super().make_parser(ctx)
        parse = parser.parse_args

        def parse_kept(args: list[str]) -> Any:
            opts, rest, order = parse(args)
            ctx.meta[TYPED] = dict(opts)
            return opts, rest, order

        parser.parse_args = parse_kept  # type: ignore[method-assign]
        return parser

    def invoke(self, ctx: Any) -> Any:
        _refuse_unexpanded_home(ctx)
        _leave_deleted_cwd(ctx)
        return super().invoke(ctx)


def _param_name(param: Any) -> str:
    """The name the user knows a parameter by: an option's (``--out``), an argument's (``STORE``)."""
    return str(param.opts[0]) if param.param_type_name == "option" else (param.name or "").upper()


def _path_params(ctx: Any) -> list[tuple[str, PurePath]]:
    """The command's path arguments and options, as (the name the user knows, its value)."""
    return [
        (_param_name(param), value)
        for param in ctx.command.params
        if isinstance(value := ctx.params.get(param.name), PurePath)
    ]


def _refuse_unexpanded_home(ctx: Any) -> None:
    """A path that begins with ``~`` and does not exist stops the command (exit 2, one line): the
    shell did not expand it (quoted, or from a config file), and ``--out '~/fcstore'`` made a
    directory named ``~`` in the working directory, where a later ``rm -rf ~...`` is the classic
    accident (review R38a s50 #9). One that exists is the user's own directory named so: used."""
    typed_values = ctx.meta.get(TYPED, {})
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if not isinstance(value, PurePath):
            continue
        # as typed: ``./~x`` is the ``~x`` of its Path, yet no shell would have expanded it (review
        # R39a s50 #4: the advice "./~x for a directory named so" was refused too); a value from an
        # environment variable or a default: its Path's text
        typed = typed_values.get(param.name)
        text = typed if isinstance(typed, str) else str(value)
        if text.startswith("~") and not os.path.lexists(value):
            name = _param_name(param)
            home = os.path.expanduser(text)
            meant = f" ({home})" if home != text else ""
            raise _fatal(
                UsageError(
                    f"{name} {text} begins with '~', which no shell expanded here (quoted?); give the path "
                    f"itself{meant}, or ./{text} for a file or directory named so"
                )
            )


#: the variables the system's temporary directory comes from (Python's ``tempfile``: Dask's default
#: scratch, serve's metrics directory, train's spooled log)
_TEMP_VARIABLES = ("TMPDIR", "TEMP", "TMP")

#: the environment variables holding a path that each command reads (itself, or the library it
#: runs: Dask, prometheus_client, Triton, torch, matplotlib); FEATURECACHE_STORE_PATH is not one:
#: serve sets it from its STORE argument
PATH_VARIABLES: dict[str, tuple[str, ...]] = {
    "build": ("DASK_TEMPORARY_DIRECTORY", "DASK_CONFIG", "DASK_ROOT_CONFIG", *_TEMP_VARIABLES),
    "serve": ("FEATURECACHE_AUTH_TOKEN_FILE", "PROMETHEUS_MULTIPROC_DIR", *_TEMP_VARIABLES),
    "train": (
        "FEATURECACHE_AUTH_TOKEN_FILE",
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        *_TEMP_VARIABLES,
    ),
    "report": ("MPLCONFIGDIR", *_TEMP_VARIABLES),
}


def _relative_path_variables(command: str | None) -> list[tuple[str, str]]:
    """(name, value) of each variable of :data:`PATH_VARIABLES` for ``command`` that is set to a
    relative path (the token file's without its surrounding whitespace, which its reader drops)."""
    found = []
    for name in PATH_VARIABLES.get(command or "", ()):
        value = os.environ.get(name, "")
        if name == "FEATURECACHE_AUTH_TOKEN_FILE":
            value = value.strip()
        if value.strip() and not os.path.isabs(value):
            found.append((name, value))
    return found


def _leave_deleted_cwd(ctx: Any) -> None:
    """Started from a working directory that was deleted: a path argument relative to it stops
    the command (exit 3, one line: it names nothing there, and from anywhere else it would name
    something else); with every path absolute the command goes on from ``/``, which always
    exists, so that the processes it starts can start (review R38a s50 #7: multiprocessing's
    spawn reads the working directory, and ``serve --workers 2`` died with a traceback, exit 1;
    ``build`` exited 3 after ~130 lines of Dask tracebacks; ``import torch`` dies there too). So
    does a relative path in an environment variable the command reads (:data:`PATH_VARIABLES`):
    from ``/`` ``FEATURECACHE_AUTH_TOKEN_FILE=tmp/x`` read ``/tmp/x``, ``DASK_TEMPORARY_DIRECTORY=rel``
    made ``/rel`` (review R39a s50 #5)."""
    try:
        os.getcwd()
        return
    except FileNotFoundError:
        pass
    relative = [f"{name} {value}" for name, value in _path_params(ctx) if not value.is_absolute()]
    relative += [f"{name}={value}" for name, value in _relative_path_variables(ctx.command.name)]
    if relative:
        raise _fatal(
            FeatureCacheError(
                f"the current directory no longer exists (it was deleted), and {', '.join(relative)} "
                f"{'is' if len(relative) == 1 else 'are'} relative to it: cd to an existing directory, "
                "or give absolute paths"
            )
        )
    os.chdir("/")


app = typer.Typer(
    cls=_Group,
    name="featurecache",
    help=(
        "Ahead-of-time feature cache for AlphaFold3-style training.\n\n"
        "build: precompute atom/token/MSA/conformer features into a Zarr v3 + Arrow store (on Dask).\n"
        "info / verify: inspect and check a store.  prune: delete parts no index row uses.\n"
        "serve: HTTP lookup service over a store.\n"
        "train: the reference training loop (client dataset + Triton-kernel model).\n"
        "report / plan: look at what is in a store; plan GPU memory per entry.\n\n"
        "Exit status: 0 ok, 1 some inputs failed (build), 2 usage, 3 fatal, 4 verify mismatch, 130 Ctrl-C "
        "(build, train), 143 SIGTERM (build, train, serve); each command's --help lists its own."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from featurecache import __version__, source_digest
        from featurecache.const import FEATURIZER_VERSION, SCHEMA_VERSION, STORE_FORMAT_VERSION

        # the source digest tells two installs of one version apart, as the build compares its workers
        typer.echo(
            f"featurecache {__version__} (featurizer {FEATURIZER_VERSION}, store format "
            f"{STORE_FORMAT_VERSION}, schema {SCHEMA_VERSION}; source {source_digest()})"
        )
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_version,
            is_eager=True,
            help="Print the version (and the featurizer, store format and schema versions, and the digest of "
            "the source files, which any edit to the code changes) and exit.",
        ),
    ] = False,
) -> None:
    pass


def _setup_logging(verbose: bool) -> None:
    from rich.console import Console
    from rich.logging import RichHandler

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        # on stderr: stdout keeps what a command prints as its result (tables, JSON, summaries)
        handlers=[RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=False)],
    )
    for noisy in ("distributed", "bokeh", "tornado", "asyncio", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _fatal(exc: BaseException) -> typer.Exit:
    """Print ``exc`` as one line; exit 2 for an invalid argument, else 3."""
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    return typer.Exit(EXIT_USAGE if isinstance(exc, UsageError) else EXIT_FATAL)


#: The modules each command imports from its extra (pyproject's optional-dependencies, an extra per
#: command), by import name: ``Bio`` is biopython. ``[train]`` is ``[client]`` (torch, scipy, httpx)
#: and ``[model]`` (triton: the model's kernels import it even for ``--device cpu``). The build's
#: dashboard needs bokeh too, but without it the build runs without a dashboard.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "build": ("gemmi", "rdkit", "Bio", "scipy", "dask", "distributed", "cryptography"),  # TLS: R42c s52 #3
    "serve": ("fastapi", "uvicorn", "pydantic_settings", "prometheus_client"),
    "train": ("torch", "scipy", "httpx", "triton"),
    "report": ("matplotlib",),
}


def _require_extra(command: str) -> None:
    """Stop ``command`` with exit 3 and one line naming the first module of its extra that is not
    installed and the ``pip install`` that brings it, before the command imports any: the bare
    ModuleNotFoundError was a traceback and exit 1, which for ``build`` means "some inputs failed"
    (review R28a s46 #1). ``find_spec`` finds a module without importing it (``build``'s driver
    does not import scipy)."""
    import importlib.util

    for module in EXTRA_MODULES[command]:
        try:
            missing = importlib.util.find_spec(module) is None
        except ValueError:  # imported already, without a __spec__
            missing = False
        if missing:
            raise _fatal(
                FeatureCacheError(
                    f"featurecache {command} needs the [{command}] extra (module {module} is not installed): "
                    f"pip install 'featurecache[{command}]'"
                )
            )


def _store_unreadable(store: Path, serving: bool) -> str | None:
    """Why the user this process runs as cannot read the store directory ``store`` (it, its
    ``zarr.json`` or its ``index/``, or a directory above it it may not search, named), naming that
    uid, the owner and the fix (:func:`featurecache.store.index.access_problem`, which a part or
    index file found unreadable later gets too); None when it can, or when ``store`` is not there
    or not a directory (each command's own error says so). Replaces click's ``readable`` check,
    whose "path '/store' is not readable" was a usage error (exit 2) naming neither the uid nor
    the fix (review R1 s27 #5: the lookup image runs as uid 10001)."""
    import stat

    from featurecache.store.index import access_problem

    try:
        st = store.stat()
    except PermissionError as exc:
        return access_problem(store, store, serving=serving) or f"cannot read {store}: {exc.strerror}"
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    for path in (store / "zarr.json", store / "index"):  # what a command reads first, before any part
        problem = access_problem(path, store, serving=serving)
        if problem is not None:
            return problem
    return None


def _readable_store(ctx: typer.Context, store: Path | None) -> Path | None:
    """Callback of every store argument (and build's --out, train's --store): a store the process
    may not read stops the command with exit 3, as each command's --help says for an unreadable store,
    and one line naming the uid and the fix (:func:`_store_unreadable`)."""
    if store is not None and not ctx.resilient_parsing:
        problem = _store_unreadable(store, serving=ctx.info_name == "serve")
        if problem is not None:
            raise _fatal(StoreError(problem))
    return store


def _store_argument(help_text: str) -> Any:
    """A command's STORE argument: its readability checked by :func:`_readable_store` (exit 3)
    rather than by click (``readable=True``: exit 2)."""
    return typer.Argument(help=help_text, readable=False, callback=_readable_store)


Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")]


@app.command(cls=_Command)
def build(
    ctx: typer.Context,
    pdb_dir: Annotated[
        Path,
        typer.Option(
            "--pdb-dir", help="Directory of structures (mmCIF/PDB/BinaryCIF, .gz ok); searched recursively."
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Store directory (created; an existing store is extended).",
            readable=False,
            callback=_readable_store,
        ),
    ],
    msa_dir: Annotated[
        Path | None,
        typer.Option(
            "--msa-dir",
            help="Directory of MSAs (a3m/sto, .gz ok) joined to chains by layout and query sequence.",
        ),
    ] = None,
    ccd: Annotated[
        Path | None,
        typer.Option("--ccd", help="components.cif[.gz] or a directory of per-component CIF files."),
    ] = None,
    no_ccd: Annotated[
        bool,
        typer.Option(
            "--no-ccd",
            help="Build without CCD definitions over a store built with --ccd (its entries with a ligand or a "
            "modified residue are rebuilt without them). Without --ccd or --no-ccd such a build is refused (exit 2).",
        ),
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            help="LocalCluster worker processes (default: CPU count); more than this machine runs (4 per CPU, "
            "256 MiB of memory each) is refused (exit 2). Ignored with --scheduler.",
        ),
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option("--scheduler", help="Address of an existing Dask scheduler, e.g. tcp://host:8786."),
    ] = None,
    part_size: Annotated[
        int, typer.Option("--part-size", help="Entries per structure part (one Dask task writes one part).")
    ] = 16,
    msa_depth: Annotated[
        int, typer.Option("--msa-depth", help="Maximum stored MSA rows per sequence (query is row 0).")
    ] = 16384,
    conformer_timeout: Annotated[
        float,
        typer.Option(
            "--conformer-timeout",
            help="Seconds allowed per component for RDKit embedding before the next fallback (> 0, at most "
            "4294967295, RDKit's limit).",
        ),
    ] = 20.0,
    keep_crystallization_aids: Annotated[
        bool,
        typer.Option(
            "--keep-cryst-aids",
            help="Keep the crystallization aids of X-ray structures (SO4, GOL, EDO, PO4, ACT, PEG, DMS, TRS, PGE, "
            "PG4, FMT, EPE, MPD, MES, CD, IOD), which are removed by default as AF3 removes them from its training "
            "structures (supplement 2.5.4, Table 9). Part of every entry's key: changing it rebuilds the entries.",
        ),
    ] = False,
    drop_crystallization_aids: Annotated[
        bool,
        typer.Option(
            "--drop-cryst-aids",
            help="Remove them (the default) over a store built with --keep-cryst-aids: every entry is rebuilt (the "
            "setting is part of every entry's key) and its X-ray entries lose the aids. Without --keep-cryst-aids or "
            "--drop-cryst-aids such a build is refused (exit 2).",
        ),
    ] = False,
    allow_downgrade: Annotated[
        bool,
        typer.Option(
            "--allow-downgrade",
            help="Rebuild entries and MSAs that a newer featurecache (a newer featurizer version) built, as this "
            "featurecache's older featurizer. Without it a build that would do so is refused (exit 2, naming the "
            "versions and counts; nothing written): upgrade featurecache instead where you can.",
        ),
    ] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")] = True,
    dashboard: Annotated[
        bool | None,
        typer.Option(
            "--dashboard/--no-dashboard",
            help="Serve the embedded cluster's Dask dashboard on a free 127.0.0.1 port (address printed; needs "
            "bokeh; default on, see docs/build.md for its environment variable). Off, the cluster starts "
            "~0.5 s sooner.",
            show_default=False,
        ),
    ] = None,
    verbose: Verbose = False,
) -> None:
    """Build (or extend) a feature store from structure files, on Dask.

    Re-running over the same inputs recomputes nothing; new files are added; a killed build resumes where it \
stopped. Bad inputs become rows of index/failures.arrow (exit status 1).

    A store records the settings its entries were built with, per --pdb-dir and --msa-dir: a build of the \
same directory that leaves out one of them (--ccd, --msa-depth, --keep-cryst-aids) is refused (exit 2, \
naming it) instead of rebuilding its entries at the default; give the setting to keep it, or the new value \
to change it.

    Exit status: 0 everything built; 1 some inputs failed (in this run, or still failing from an earlier one), \
or stored entries were lost with a part deleted by hand (no input gives them; recorded as removed); \
2 usage error (an invalid option, a missing input directory; nothing written); 3 fatal (unwritable output, \
unreachable scheduler, a worker running other code, unreadable store, the \\[build] extra not installed); 130 Ctrl-C and 143 SIGTERM (finished \
parts kept).
    """
    _require_extra("build")
    _setup_logging(verbose)
    if dashboard is None:
        dashboard = os.environ.get("FEATURECACHE_DASHBOARD", "1").strip().lower() not in _OFF
    try:  # a Ctrl-C during these imports (seconds: Dask, RDKit) gets the one line too
        _refuse_contradictions(ccd, no_ccd, keep_crystallization_aids, drop_crystallization_aids)
        from featurecache.build.config import UNSET, BuildConfig
        from featurecache.build.run import run_build

        # the recorded settings as given: one left out is left out of run_build's arguments too, which
        # refuses it over a store that records another value (build.config.settings_left_out)
        given = {name for name in ("ccd", "no_ccd", "msa_depth", "keep_crystallization_aids",
                                   "drop_crystallization_aids")
                 if (source := ctx.get_parameter_source(name)) is not None
                 and source.name not in ("DEFAULT", "DEFAULT_MAP")}  # fmt: skip
        settings: dict[str, Any] = {"conformer_timeout_s": conformer_timeout}
        if "msa_depth" in given:
            settings["msa_depth_cap"] = msa_depth
        if given & {"keep_crystallization_aids", "drop_crystallization_aids"}:
            settings["keep_crystallization_aids"] = keep_crystallization_aids
        summary = run_build(
            pdb_dir=pdb_dir, out=out, msa_dir=msa_dir,
            ccd=ccd if "ccd" in given else None if "no_ccd" in given else UNSET, workers=workers,
            scheduler=scheduler, part_size=part_size, config=BuildConfig(**settings), progress=progress,
            dashboard=dashboard,
            fork_server=True,  # this process runs one build: its workers are forked, not spawned
            allow_downgrade=allow_downgrade,
        )  # fmt: skip
    except FeatureCacheError as exc:
        from featurecache.build.config import SettingsLeftOut

        if isinstance(exc, SettingsLeftOut):  # worded for this command line: its options only
            typer.secho(f"error: {out} records build settings this command leaves out, which would rebuild its "
                        f"entries at the defaults; nothing was written: {'; '.join(exc.lines)}",
                        fg=typer.colors.RED, err=True)  # fmt: skip
            raise typer.Exit(EXIT_USAGE) from exc
        raise _fatal(exc) from exc
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (run.BuildTerminated: exit 143)
        from featurecache.signals import quiet_loggers

        # the build put Dask's logger levels back (the CLI's: INFO), and a close the interrupt cut
        # short is finished by Dask's exit handlers, which logged ~15 INFO lines after the last one;
        # this process exits now (review R36c s49 #5)
        quiet_loggers()
        line = (
            f"interrupted: every finished part of {out} is kept; run the same command again to resume"
            if (Path(out) / "zarr.json").is_file()
            else f"interrupted before the build wrote {out}: nothing was written"
        )
        typer.secho(line, fg=typer.colors.YELLOW, err=True)
        status = getattr(exc, "exit_status", 130)
        _exit_within(EXIT_GRACE_S, status)
        raise typer.Exit(status) from None
    from featurecache.build.summary import render_summary

    try:
        render_summary(summary)
    except (Exception, SystemExit) as exc:  # the build is done: its exit status is the build's
        _summary_not_printed(out, exc)
    failed_or_lost = summary.n_failed or summary.n_failed_earlier or summary.entries_lost
    raise typer.Exit(EXIT_INPUT_FAILURES if failed_or_lost else EXIT_OK)


def _summary_not_printed(out: Path, exc: BaseException) -> None:
    """A summary that could not be printed: a warning line (on stderr), and the build's exit status
    stands (review R38a s50 #6: a display problem made a successful build exit 1). A closed pipe
    (``build ... | head``) is not worth a line: rich raises SystemExit(1) for it (after pointing
    stdout at /dev/null); stdout goes to /dev/null so that the interpreter's last flush does not
    fail too (exit 120)."""
    if isinstance(exc, (BrokenPipeError, SystemExit)):
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)
        return
    with contextlib.suppress(Exception):
        typer.secho(f"warning: the build's summary could not be printed ({type(exc).__name__}: {exc}); the "
                    f"store is written: featurecache info {shlex.quote(str(out))}", fg=typer.colors.YELLOW, err=True)  # fmt: skip


def _refuse_contradictions(ccd: Path | None, no_ccd: bool, keep_aids: bool, drop_aids: bool) -> None:
    """Exit 2 (nothing written) when ``--ccd`` and ``--no-ccd`` are both given, or ``--keep-cryst-aids``
    and ``--drop-cryst-aids``. A recorded setting left out is refused by ``run_build``
    (``build.config.SettingsLeftOut``)."""
    for a, b, both in (("--ccd", "--no-ccd", ccd is not None and no_ccd),
                       ("--keep-cryst-aids", "--drop-cryst-aids", keep_aids and drop_aids)):  # fmt: skip
        if both:
            typer.secho(f"error: {a} and {b} contradict each other: give one", fg=typer.colors.RED, err=True)
            raise typer.Exit(EXIT_USAGE)


#: seconds an interrupted build's process may take to exit after its last line
EXIT_GRACE_S = 30.0


def _exit_within(seconds: float, status: int) -> None:
    """End the process with ``status`` if it has not exited ``seconds`` after this call, naming what
    it was still waiting for. Called once an interrupted build has settled its store and printed its
    last line: nothing is left to lose. A full test run once saw such a build still alive 120 s after
    that line (session 31, not reproduced in 95 tries alone): an exit handler waiting on a thread or
    child process."""
    import sys
    import threading

    def force() -> None:
        try:
            import multiprocessing

            waiting = [
                t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()
            ]
            children = [f"{c.name} (pid {c.pid})" for c in multiprocessing.active_children()]
            sys.stderr.write(f"note: still running {seconds:g} s after the last line (non-daemon threads: {waiting}; "
                             f"child processes: {children}); exiting now\n")  # fmt: skip
            sys.stderr.flush()
        finally:
            os._exit(status)

    timer = threading.Timer(seconds, force)
    timer.daemon = True
    timer.start()


#: values of FEATURECACHE_DASHBOARD that turn the build's dashboard off (as --no-dashboard)
_OFF = ("0", "false", "no", "off")


def _first_build_unfinished(store: Path) -> bool:
    """Whether the store's published index is flagged as that of a first build that has not
    finished (``store.index.UNFINISHED_KEY``; ``info``'s warning says the same). Read before a
    command reads the store; its warning is printed only if the command then succeeds (a missing or
    damaged index is the command's own error)."""
    from featurecache.store.index import first_build_finished
    from featurecache.store.layout import INDEX_DIR

    return (store / INDEX_DIR / "entries.arrow").is_file() and not first_build_finished(store)


def _warn_unfinished(store: Path, covers: str) -> None:
    """One line on stderr: the first build has not finished, so what the command says is partial."""
    typer.secho(
        f"warning: {store}: its first build has not finished: the index lists only the entries written so far, "
        f"so {covers} (if no build is running, run the same `featurecache build` again to finish it)",
        fg=typer.colors.YELLOW, err=True,
    )  # fmt: skip


@app.command(cls=_Command)
def info(
    store: Annotated[Path, _store_argument("Store directory.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    failures: Annotated[
        bool,
        typer.Option(
            "--failures",
            help="List every failure (path, stage, error, message). Without it the failures are grouped by "
            "stage and error class: the 10 largest groups, each with its count and one example.",
        ),
    ] = False,
    warnings: Annotated[
        bool,
        typer.Option(
            "--warnings",
            help="List every warning (entry, stage, message, file): problems that did not stop an entry's build, "
            "such as a dropped duplicate atom or an ignored data block. Without it only their count by stage.",
        ),
    ] = False,
    no_msa: Annotated[
        bool,
        typer.Option(
            "--no-msa",
            help="List every polymer chain without an MSA from files (entry, label and auth chain id, molecule "
            "type, sequence length, MSA depth): no alignment file matched its sequence, so it trains on its "
            "single sequence. Usual for DNA and RNA; a protein chain listed is missing its alignments. Without "
            "it only their count. With --json: keys chains_without_msa (counts: by molecule type, entries) and "
            "no_msa_chains (one object per chain).",
        ),
    ] = False,
    tsv: Annotated[
        bool,
        typer.Option(
            "--tsv",
            help="With --failures and/or --warnings: only their rows, tab-separated, one per line after a header "
            "(record, entry_id, path, stage, error_class, message; a tab, newline or backslash in a value "
            "escaped as \\t, \\n, \\\\), streamed: for scripts and stores with many rows. No summary. "
            "With --no-msa instead: its chains, one per line after a header (entry_id, label_id, auth_id, "
            "mol_type, length, msa_depth).",
        ),
    ] = False,
) -> None:
    """Counts, sizes, versions and a failures summary of a store.

    Exit status: 0 shown (warnings on stderr: an index behind its parts, an unfinished first build); \
2 usage error; 3 the store or an index file is missing or unreadable.
    """
    from featurecache.store.info import print_info

    if tsv and (json_out or not (failures or warnings or no_msa)):
        raise _fatal(UsageError("--tsv lists the rows of --failures and/or --warnings, or of --no-msa: give "
                                "them, and leave --json out"))  # fmt: skip
    if tsv and no_msa and (failures or warnings):
        raise _fatal(UsageError("--tsv lists the rows of --failures and/or --warnings, or of --no-msa (other "
                                "columns): give --no-msa --tsv in a command of its own"))  # fmt: skip
    try:
        lag = print_info(store, as_json=json_out, failures=failures, warnings=warnings, tsv=tsv,
                         no_msa=no_msa)  # fmt: skip
    except FeatureCacheError as exc:
        raise _fatal(exc) from exc
    for line in lag:  # the index is behind its parts: the counts above are not the store's
        typer.secho(f"warning: {line}", fg=typer.colors.YELLOW, err=True)


@app.command(cls=_Command)
def show(
    store: Annotated[Path, _store_argument("Store directory.")],
    entry_id: Annotated[
        str,
        typer.Argument(
            help="Entry id: a file's stem, e.g. 7a4d-assembly1 (every id: the id column of index/entries.arrow)."
        ),
    ],
) -> None:
    """Look up one entry: its index row, chains, its polymer chains' MSAs (depth, number of alignment files) and the shapes of its arrays.

    Exit status: 0 shown; 2 usage error, also an entry id the store does not hold; 3 the store, an index \
file or the entry's arrays are missing or unreadable.
    """
    from featurecache.store.show import print_entry

    try:
        print_entry(store, _typed_id(entry_id))
    except NotFound as exc:  # an id the store does not hold: a bad argument, not a broken store
        raise _fatal(UsageError(f"{exc}{_not_indexed_yet(store)}")) from exc
    except FeatureCacheError as exc:
        raise _fatal(exc) from exc


def _typed_id(arg: str) -> str:
    """An entry id as typed, judged by its bytes as the build judges a file's name
    (``discover.escaped_path``): under an ASCII file-system encoding (``LC_ALL=C PYTHONUTF8=0``) the
    argument ``é 1a8o`` arrives as lone surrogates, where the build made the id ``é 1a8o`` of the
    file ``é 1a8o.pdb`` by its UTF-8 bytes (review R39a s50 #7); a byte that is not UTF-8 is
    ``\\xNN``, as in the id of such a name. A text that has no bytes here (a program's call with a
    character the file-system encoding lacks) is used as it is."""
    try:
        return os.fsencode(arg).decode("utf-8", "backslashreplace")
    except UnicodeError:
        return arg


def _not_indexed_yet(store: Path) -> str:
    """What ``info`` warns of when the index does not list every entry written (a first build that
    has not finished, parts written after the index's last rebuild, parts held back: ``index_lag``),
    as a clause for ``show``'s "no entry" error; "" when the index is up to date (review R27b s45 #7)."""
    from featurecache.store.info import index_lag
    from featurecache.store.reader import open_store

    try:
        opened = open_store(store)
        lag = index_lag(opened)
    except FeatureCacheError:
        return ""
    prefix = f"{opened.path}: "
    return "".join(f" ({line.removeprefix(prefix)})" for line in lag)


@app.command(cls=_Command)
def verify(
    store: Annotated[Path, _store_argument("Store directory.")],
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Take every damaged entry and MSA (arrays that do not read back to their content hash) out of "
            "the index, so that the next `featurecache build` from their sources rebuilds exactly those, and "
            "`featurecache prune` then deletes the parts that hold nothing else. A part whose own index is "
            "unreadable is moved to STORE/damaged-parts/ and its entries are rebuilt; so is a component part whose "
            "arrays do not read or whose reference conformers do not match their content hash (the build's chem "
            "stage computes its components again). An entry or MSA whose part "
            "is gone (deleted) is damaged too (its source directory: the one `info` shows the latest build read). "
            "Nothing whose source files are gone is taken out (it could not be rebuilt) unless --drop-gone; while "
            "such a one of a deleted part is kept, the repair changes nothing (rewriting the index would drop it). "
            "The other rows of deleted parts a repair's rewrite drops (failures, components: recomputed by the next "
            "build) are named; the store is then verified again and what is left is printed. An entry, MSA or "
            "component part whose check stopped on an error that does not say its data is unreadable (an UNCHECKED "
            "line: a bug in the reader, not damage) is kept: there is nothing to rebuild.",
        ),
    ] = False,
    drop_gone: Annotated[
        bool,
        typer.Option(
            "--drop-gone",
            help="With --repair: also take out the damaged entries and MSAs whose source files are gone "
            "(they are lost: no build can store them again).",
        ),
    ] = False,
    verbose: Verbose = False,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show progress bars (on stderr).")
    ] = True,
) -> None:
    """Recompute every entry's, MSA's and reference conformer's content hash and check index <-> parts consistency.

    Each problem is one 'MISMATCH ...' line on stdout (progress, log lines and warnings go to stderr); \
'ok: store verified' when there is none. An entry, MSA or component whose check stopped on an error that does not \
say its data is unreadable (a bug in the reader) is an 'UNCHECKED ... could not be checked (KeyError: ...)' line \
instead: not damage, --repair keeps it. For damaged entries, MSAs and component parts (reference conformers) \
it says how to repair the store: `featurecache verify STORE --repair`, then `featurecache build` from the same \
directories. Components written before their content hash was recorded are only checked to read (a note says so).

    Exit status: 0 verified (--repair: repaired, or nothing to repair); 2 usage error; 3 the store or an \
index file is missing or unreadable, a build or prune is writing the store, or (--repair) the store cannot \
be written; 4 a mismatch (an entry's, MSA's or component's content hash, naming its part; a missing or \
unreadable part, shard or part index; an index behind its parts; chain rows or MSA keys that do not match \
the index), or an UNCHECKED line; with --repair: damage left because its source files are gone, or problems it could not fix (its \
MISMATCH lines, printed also after a repair that wrote) or kept (its UNCHECKED lines); 143 stopped by SIGTERM \
(after its worker pool is shut down, one line on stderr, no report).
    """
    _setup_logging(verbose)
    from featurecache.errors import StoreError
    from featurecache.store.root import holder_command, lock_holder
    from featurecache.store.verify import repair_store, verify_report

    if drop_gone and not repair:
        raise _fatal(UsageError("--drop-gone is read only with --repair"))
    holder = lock_holder(store)
    if holder is not None:  # its parts and index are being written: what verify sees is not the store's state
        raise _fatal(
            StoreError(
                f"a {holder_command(holder)} is writing {store} ({holder} holds its lock): verify it when that ends"
            )
        )
    unfinished = _first_build_unfinished(store)
    try:
        if repair:
            result = repair_store(store, drop_gone=drop_gone, progress=progress)
            report = result.report
        else:
            report = verify_report(store, progress=progress)
    except FeatureCacheError as exc:
        raise _fatal(exc) from exc
    if unfinished:  # (exit status unchanged: the entries it lists were checked)
        _warn_unfinished(store, "verify checked only part of the store, its counts are partial")
    if repair:
        _print_repair(store, result)
        left = (
            result.kept or result.kept_parts or result.left or (result.report.problems and not result.written)
        )
        raise typer.Exit(EXIT_VERIFY_MISMATCH if left else EXIT_OK)
    for p in report.problems:  # the result: on stdout (`verify S > report.txt` keeps it)
        _print_problem(p, report.unchecked)
    for note in report.notes:
        typer.echo(f"note: {note}", err=True)
    if report.problems:
        _print_repair_hint(store, report)
        if report.unchecked:
            typer.echo(f"{_kept_unchecked(len(report.unchecked), '`featurecache verify --repair` keeps')}",
                       err=True)  # fmt: skip
        holder = lock_holder(store)
        if holder is not None:
            typer.echo(
                f"note: a {holder_command(holder)} started meanwhile ({holder}): verify {store} again when it ends",
                err=True,
            )
        raise typer.Exit(EXIT_VERIFY_MISMATCH)
    if report.newer:  # entries of parts a newer featurecache wrote: listed in the notes, not damage
        n = len(report.newer)
        typer.echo(f"ok: store verified, except {n} entr{'y' if n == 1 else 'ies'} written by a newer featurecache "
                   "(notes above): upgrade featurecache to verify them")  # fmt: skip
        return
    typer.echo("ok: store verified")


def _print_problem(problem: str, unchecked: Collection[str]) -> None:
    """One problem of verify's on stdout: ``UNCHECKED`` when an error stopped its check that does not
    say its data is unreadable (``VerifyReport.unchecked``: not damage), ``MISMATCH`` otherwise."""
    typer.secho(f"{'UNCHECKED' if problem in unchecked else 'MISMATCH'} {problem}", fg=typer.colors.RED)


def _kept_unchecked(n: int, who: str = "--repair keeps") -> str:
    """Why ``--repair`` leaves the ``n`` UNCHECKED lines printed above."""
    return (f"{who} the {n} UNCHECKED line{'s' if n != 1 else ''} above: {'its' if n == 1 else 'their'} check "
            "stopped on an error that does not say the data is unreadable (a bug in featurecache's reader, not "
            "damage), so there is nothing to rebuild; verify again with a featurecache that reads "
            f"{'it' if n == 1 else 'them'}")  # fmt: skip


def _not_fixed(left: list[str], unchecked: Collection[str]) -> str:
    """What a repair left of the problems ``left`` (printed above), by kind: the MISMATCH lines it
    could not fix, the UNCHECKED ones it keeps ("": none)."""
    n = sum(p not in unchecked for p in left)
    said = [f"--repair could not fix the {n} MISMATCH line{'s' if n != 1 else ''} above"] if n else []
    u = len(left) - n
    return "; ".join(said + ([_kept_unchecked(u)] if u else []))


def _names(ds: list[Any], limit: int = 10) -> str:
    shown = [f"{d.id}" if d.kind == "entry" else f"MSA {d.id[:12]}… ({d.chains or 'no chain'})" for d in ds]
    return first_named(shown, limit)


def _print_repair_hint(store: Path, report: Any) -> None:
    """After verify's MISMATCH lines: what repairs the store (advice: on stderr; stdout holds the result)."""
    from featurecache.store.verify import rebuild_command, rebuild_note

    q = shlex.quote(str(store))
    ok = [d for d in report.damaged if d.source_gone is False]
    gone = [d for d in report.damaged if d.source_gone is not False]
    comp = getattr(report, "damaged_component_parts", {})
    no_component = getattr(report, "no_component", {})
    # entries of a part that is gone whose files are gone too: any repair rewrites the index from the
    # parts, which would drop them, so --repair changes nothing without --drop-gone
    lost = sorted({d.part for d in gone if d.part_gone})
    if ok or report.bad_index_parts or comp or no_component:
        what = []
        if ok:
            what.append(f"takes the damaged {_names(ok)} out of the index")
        if report.bad_index_parts:
            moved = ", ".join(f"{n} ({_own_index_damage(why)})" for n, why in report.bad_index_parts.items())
            what.append(f"moves part(s) {moved} to {store}/damaged-parts/")
        gone_comp = [n for n in comp if not (store / "parts" / n).is_dir()]
        if set(comp) - set(gone_comp):
            moved = ", ".join(f"{n} ({_component_damage(report.damaged_component_parts.get(n, ''))})"
                              for n in comp if n not in gone_comp)  # fmt: skip
            what.append(f"moves component part(s) {moved} to {store}/damaged-parts/, and the build's chem stage "
                        "recomputes their components")  # fmt: skip
        if gone_comp:
            what.append(f"drops the rows of the missing component part(s) {', '.join(gone_comp)}, and the build's "
                        "chem stage recomputes their components")  # fmt: skip
        if no_component and not comp:
            what.append(f"has the build's chem stage scan every structure part again, which computes the "
                        f"components of {', '.join(sorted(no_component))}")  # fmt: skip
        note = rebuild_note(store, ok, report.bad_index_parts)
        repair = (
            "--repair --drop-gone` (without --drop-gone it changes nothing: below) " if lost else "--repair` "
        )
        typer.echo(f"to repair: `featurecache verify {q} {repair}{' and '.join(what)}; then "
                   f"`{rebuild_command(store, ok, report.bad_index_parts)}` rebuilds them from their source files"
                   f"{f' ({note})' if note else ''} and `featurecache prune {q}` deletes the parts left unused",
                   err=True)  # fmt: skip
    if gone:
        blocked = (f"; while the index lists them, `--repair` without --drop-gone changes nothing (their part(s) "
                   f"{', '.join(lost)} are missing, and a repair rewrites the index from the parts, which would "
                   "drop them)" if lost and (ok or report.bad_index_parts or comp or no_component) else "")  # fmt: skip
        typer.echo(f"cannot be rebuilt: the source files of the damaged {_names(gone)} are gone (or their "
                   f"directory is not recorded or not there); `featurecache verify {q} --repair --drop-gone` "
                   f"removes them from the store{blocked}", err=True)  # fmt: skip


def _component_damage(why: str, its: bool = False) -> str:
    """What is wrong with a damaged component part, from verify's reason for it: its reference
    conformers differ from what the build wrote (content hash), or its arrays do not read."""
    if "cannot tell which copy is damaged" in why:  # (its own index records no checksum: review R29b s46 #1)
        return ("its own index differs from the store's index, and records no checksum to tell which is damaged"
                if its else "own index differs from the store's index")  # fmt: skip
    if "content hash" in why:
        return "its conformers are not what the build wrote" if its else "content hash differs"
    return "its arrays are unreadable" if its else "arrays unreadable"


def _own_index_damage(why: str) -> str:
    """A few words for verify's reason that a part's own index is damaged (``bad_index_parts``):
    changed since the part was written, missing, or unreadable (review R29a s46 #3)."""
    if "has changed since the part was written" in why:
        return "own index changed since it was written"
    if "is missing (its part.json records it)" in why:
        return "own index file missing"
    return "own index unreadable"


def _print_repair(store: Path, result: Any) -> None:
    from featurecache.store.verify import rebuild_command, rebuild_note

    unchecked = result.report.unchecked
    if not result.written:  # the store is as verify found it: every problem, as plain verify prints it
        for p in result.report.problems:
            _print_problem(p, unchecked)
    for d in result.removed:
        typer.echo(f"removed from the index: {_names([d])} (part {d.part}): {d.problem}")
    for name, where in result.moved_parts.items():
        why = (
            _component_damage(result.report.damaged_component_parts[name], its=True)
            if name in result.report.damaged_component_parts
            else f"its {_own_index_damage(result.report.bad_index_parts.get(name, ''))}"
        )
        typer.echo(f"moved part {name} ({why}) to {where}")
    if result.removed_again:
        typer.echo(
            f"removed again: {', '.join(result.removed_again)} (a moved part had recorded their removal)"
        )
    for line in _dropped_lines(result):
        typer.echo(line)
    for d in result.kept:
        where = f"{d.source_dir}/{d.source_path}" if d.source_dir else d.source_path
        missing = f"part {d.part} is missing and " if d.part_gone else ""
        typer.secho(f"MISMATCH kept {_names([d])}: {missing}its source files are gone ({where}), it cannot be "
                    "rebuilt; --drop-gone removes it", fg=typer.colors.RED)  # fmt: skip
    for name, why in result.kept_parts:
        typer.secho(f"MISMATCH kept part {name}: {why}; --drop-gone moves it out", fg=typer.colors.RED)
    # verified again after the write: what the repair could not fix, as plain verify prints it
    for p in result.left:
        _print_problem(p, unchecked)
    for p in result.pending:
        typer.echo(f"until the build below: {p}")
    if result.blocked:
        would = (
            [f"take the damaged {_names(result.would_remove)} out of the index"]
            if result.would_remove
            else []
        )
        would += [f"move part(s) {', '.join(result.would_move)} aside"] if result.would_move else []
        would += (
            [f"drop the rows of the missing component part(s) {', '.join(result.would_drop)}"]
            if result.would_drop
            else []
        )
        differs = sorted(result.report.index_differs)
        would += (
            [f"rewrite {', '.join(f'index/{n}.arrow' for n in differs)} from the parts"] if differs else []
        )
        would += ["rewrite the index in today's layout"] if result.report.old_layout and not differs else []
        # (a blocked rewrite was named by none of these: "--repair would )", review R30 s46 #5)
        typer.echo(f"{result.blocked} (without them, --repair would {' and '.join(would)})" if would
                   else result.blocked)  # fmt: skip
    elif result.removed or result.moved_parts or result.dropped_component_parts or result.rescan:
        note = rebuild_note(store, result.removed, result.moved_parts)
        unfixed = f"; {_not_fixed(result.left, unchecked)}" if result.left else ""
        typer.echo(f"repaired: now run `{rebuild_command(store, result.removed, result.moved_parts)}` to rebuild them"
                   f"{f' ({note})' if note else ''}, then `featurecache prune {shlex.quote(str(store))}`{unfixed}")  # fmt: skip
    elif not result.kept and not result.kept_parts:
        # after a write, what is left is what verify found again (review R29b s46 #3)
        left = result.left if result.written else result.report.problems
        done = _repaired_files(result)
        mismatches = [p for p in left if p not in unchecked]
        if done:
            typer.echo(f"repaired: {done}" + (f"; {_not_fixed(left, unchecked)}" if left else ""))
        elif mismatches:
            n, kept = len(mismatches), len(left) - len(mismatches)
            typer.echo(f"nothing --repair can fix: the {n} MISMATCH line{'s' if n != 1 else ''} above"
                       + (f"; {_kept_unchecked(kept)}" if kept else ""))  # fmt: skip
        elif left:
            typer.echo(f"nothing to repair: {_kept_unchecked(len(left))}")
        else:
            typer.echo("ok: nothing to repair")


def _repaired_files(result: Any) -> str:
    """What a repair that took nothing out and moved nothing wrote, in words ("": nothing): the
    index files it rewrote from the parts' own index, the group metadata it wrote."""
    done = []
    rewrote = getattr(result, "rewrote_index", [])
    if rewrote:
        done.append(f"rewrote {', '.join(f'index/{n}.arrow' for n in rewrote)} from the parts' own index")
    index_files = {f"index/{n}.arrow" for n in rewrote}
    groups = [w for w in result.written if w not in index_files]
    if groups:
        done.append(f"wrote {', '.join(groups)}")
    return " and ".join(done)


#: a row of an index table, in words
_DROPPED_ROW = {"failures": "failure", "components": "component", "withdrawn": "withdrawn failure",
                "removed": "removal"}  # fmt: skip
#: what becomes of the rows of a part that is gone, by index table, once a repair dropped them
_DROPPED_NEXT = {
    "failures": "the next build tries each file again",
    "withdrawn": "the next build from their directory withdraws their paths' earlier failures again",
    "removed": "what they removed is listed again where its part is still there: `featurecache prune "
    "--sources-gone` removes it again",
}


def _dropped_lines(result: Any) -> list[str]:
    """A line per part that is gone and index table whose rows ``verify --repair``'s rewrite of the
    index dropped (the damaged entries and MSAs aside: ``removed from the index`` names them)."""
    lines = []
    for table, parts in result.dropped.items():
        for part, ids in parts.items():
            shown = first_named([i for i in ids if i], 10)
            label = _DROPPED_ROW.get(table, f"{table} row")
            rows = f"{len(ids)} {label}{'s' if len(ids) != 1 else ''}" + (f" ({shown})" if shown else "")
            if table == "components":
                then = (f"the next build's chem stage recomputes those its entries use (part {result.rescan} has it "
                        "scan every structure part again)")  # fmt: skip
            else:
                then = _DROPPED_NEXT.get(table, "lost from the index")
            lines.append(f"dropped from the index with part {part}, which is missing: {rows}; {then}")
    return lines


@app.command(cls=_Command)
def prune(
    store: Annotated[Path, _store_argument("Store directory.")],
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="List what would be removed (parts, entries, MSAs), remove nothing."),
    ] = False,
    sources_gone: Annotated[
        Path | None,
        typer.Option(
            "--sources-gone",
            metavar="PDB_DIR",
            help="Also remove the stored entries whose structure files are gone from PDB_DIR (the --pdb-dir "
            "of the builds that stored them; what a build from it reports as 'sources gone'). An entry whose "
            "file, or another file of its id, is still there is never removed.",
        ),
    ] = None,
    msa_dir: Annotated[
        Path | None,
        typer.Option(
            "--msa-dir",
            help="With --sources-gone: also remove the stored MSAs whose files are all gone from this --msa-dir "
            "(their chains then have no MSA until a build stores a single-sequence one).",
        ),
    ] = None,
    verbose: Verbose = False,
) -> None:
    """Delete the parts no index row uses any more (old versions of rebuilt entries, MSAs and
    components no entry uses); what the store serves does not change.

    With --sources-gone PDB_DIR [--msa-dir DIR], first remove from the store the entries (and MSAs) \
whose source files are gone from those directories: the service and clients no longer see them, and \
their parts are deleted once nothing else in them is used. A build that finds the file again stores it again.

    Exit status: 0 pruned (or listed, --dry-run); 2 usage error (--msa-dir without --sources-gone, a \
directory that does not exist or holds no structure file (--msa-dir: no MSA file) while entries were built \
from it); 3 the store is \
missing, unreadable or unwritable, its index lists entries (or other rows) of a part that is gone (a prune \
would drop them; `featurecache verify STORE --repair` deals with them), or a build holds it.
    """
    _setup_logging(verbose)
    from featurecache.store.prune import prune_store

    try:
        result = prune_store(store, dry_run=dry_run, sources_gone=sources_gone, msa_dir=msa_dir)
    except FeatureCacheError as exc:
        raise _fatal(exc) from exc
    done = "would remove" if dry_run else "removed"
    if sources_gone is not None:
        n_e, n_m = len(result.entries), len(result.msas)
        ids = f": {', '.join(result.entries)}" if result.entries else ""
        typer.echo(
            f"{done} {n_e} entr{'y' if n_e == 1 else 'ies'} whose files are gone from {sources_gone}{ids}"
        )
        if msa_dir is not None:
            used = f" (used by {'; '.join(result.msas)})" if result.msas else ""
            typer.echo(f"{done} {n_m} MSA{'' if n_m == 1 else 's'} whose files are gone from {msa_dir}{used}")
    names = f": {', '.join(result.parts)}" if result.parts else ""
    typer.echo(f"{done} {len(result.parts)} part(s), {result.bytes / 1e6:.2f} MB{names}")


@app.command(cls=_Command)
def serve(
    store: Annotated[Path, _store_argument("Store directory (opened read-only).")],
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes.")] = 1,
    token: Annotated[
        str | None,
        typer.Option(
            help="Bearer token required on every route but /v1/health and the API docs (/docs, /redoc, "
            "/openapi.json) (or FEATURECACHE_AUTH_TOKEN). Given here it is visible to other local users "
            "in the process list; prefer the FEATURECACHE_AUTH_TOKEN environment variable (or "
            "FEATURECACHE_AUTH_TOKEN_FILE, a file holding it)."
        ),
    ] = None,
) -> None:
    """Serve a store over HTTP (FastAPI under uvicorn). OpenAPI docs at /docs.

    Exit status: 0 stopped by Ctrl-C; 2 usage error (--port, --workers, a --token that is empty or holds \
whitespace, a control character or a non-ASCII character); 3 the \\[serve] extra is not installed, the store cannot be opened, a token variable or \
file is unusable, a FEATURECACHE_* setting is invalid (a limit out of its range, a value that is not a number), \
the port cannot be bound, a worker process could not start (with --workers N: its reason in the line); \
143 stopped by SIGTERM (after a graceful shutdown; with any --workers).
    """
    _require_extra("serve")
    from featurecache.auth import clean_token
    from services.lookup.server import run_server

    try:
        if not 1 <= port <= 65535:
            raise UsageError(f"--port {port}: a TCP port is from 1 to 65535")
        if workers < 1:
            raise UsageError(f"--workers {workers}: at least 1 worker process")
        if token is not None:  # an option's value: a usage error (the variable and the file: exit 3)
            try:
                token_given = clean_token(token, "--token")
            except FeatureCacheError as exc:
                raise UsageError(str(exc)) from None
            if not token_given:
                raise UsageError("--token is empty: give a token, or leave --token out to serve without one")
        run_server(store=store, host=host, port=port, workers=workers, token=token)
    except FeatureCacheError as exc:
        raise _fatal(exc) from exc


def _at_least_one(value: int | None) -> int | None:
    if value is not None and value < 1:
        raise typer.BadParameter(f"{value} is not at least 1")
    return value


#: train --service-wait's default: seconds a run waits for a lookup service that has not answered yet
SERVICE_WAIT_S = 5.0


#: the longest --service-wait: an hour (inf or 1e6 waited for good for a wrong URL; review RF3 s24 #3)
SERVICE_WAIT_MAX_S = 3600.0


def _service_wait_seconds(value: float) -> float:
    """--service-wait: finite, > 0 and at most :data:`SERVICE_WAIT_MAX_S` (a usage error naming the
    option otherwise; typer names it)."""
    if not 0 < value <= SERVICE_WAIT_MAX_S:  # (nan and inf fail too)
        raise typer.BadParameter(f"{value} is not a number of seconds > 0 and <= {SERVICE_WAIT_MAX_S:g}")
    return value


@app.command(cls=_Command)
def train(
    store: Annotated[
        Path | None,
        typer.Option(
            "--store",
            help="Local store directory. Give exactly one of --store or --url.",
            readable=False,
            callback=_readable_store,
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option("--url", help="Lookup service URL (instead of --store; give exactly one of the two)."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            # the variables' names are in the docstring: FEATURECACHE_AUTH_TOKEN_FILE is wider than
            # this column at 80 columns and was cut to FEATURECACHE_AUTH_TOKEN_F… (review RF1 s24 #6)
            help="Bearer token of the lookup service (--url). Given here it is visible to other local users "
            "in the process list; prefer the token variables named above.",
        ),
    ] = None,
    service_wait: Annotated[
        float,
        typer.Option(
            "--service-wait",
            metavar="SECONDS",
            callback=_service_wait_seconds,
            help="How long to wait for a lookup service (--url) that has not answered yet, e.g. one "
            f"starting at the same time; then exit 3. At most {SERVICE_WAIT_MAX_S:g}.",
        ),
    ] = SERVICE_WAIT_S,
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 50,
    crop: Annotated[int, typer.Option(help="Token crop size.")] = 384,
    max_atoms: Annotated[
        int | None,
        typer.Option(
            "--max-atoms",
            callback=_at_least_one,  # not min=1: its "[x>=1]" widened the table and cut option names
            help="Atom budget of a crop. Default: none, each crop holds min(tokens, --crop) tokens (AF3 "
            "crops by tokens). With a budget, a crop holds fewer tokens when their atoms would exceed it.",
        ),
    ] = None,
    weighting: Annotated[
        str,
        typer.Option(
            "--weighting",
            help="How samples are drawn. 'af3' (default): AF3's weighted-PDB sampling (SI 2.5.1) of chains and "
            "interfaces, weight 0.5 per chain and 1 per interface times the molecule-type factors (3 protein or "
            "nucleic acid, 1 ligand) over the size of its sequence cluster; each crop is centred on the drawn "
            "chain or interface. 'uniform': every entry once per epoch, no reference chain (FeatureDataset's "
            "default; train's before this option). The default is AF3's because train is the script to copy "
            "for AF3-style training.",
        ),
    ] = "af3",
    crop_weights: Annotated[
        str,
        typer.Option(
            "--crop-weights",
            metavar="C,S,I",
            help="How often each crop is used: contiguous, spatial and spatial-interface, 3 non-negative "
            "numbers with a positive sum (normalized). Default 0.2,0.4,0.4: AF3's weighted-PDB mix "
            "(SI Table 4); e.g. 0,1,0 for spatial crops only.",
        ),
    ] = "0.2,0.4,0.4",
    max_msa_rows: Annotated[
        int,
        typer.Option(
            "--max-msa-rows",
            help="MSA rows of a sample at most, the query included: each sample takes a random number of "
            "rows from 1 to min(MSA depth, this). Default 1024 (the client's); AF3 trains with up to "
            "16,384 (memory and time grow with the rows).",
        ),
    ] = 1024,
    pair_msa: Annotated[
        bool,
        typer.Option(
            "--pair-msa/--no-pair-msa",
            help="Pair the MSA rows of protein chains of different sequences by species, as AF3 does "
            "(SI 2.3; default), or leave every chain's rows unpaired.",
        ),
    ] = True,
    crop_whole_groups: Annotated[
        bool,
        typer.Option(
            "--crop-whole-groups/--crop-per-token",
            help="Keep each ligand, glycan and modified residue whole in a crop (in or out whole), or crop "
            "token by token, as AF3 does (SI 2.7; default). A checkpoint of a featurecache before this "
            "option cropped whole groups: resume it with --crop-whole-groups.",
        ),
    ] = False,
    device: Annotated[str, typer.Option(help="cpu, cuda or cuda:N.")] = "cuda",
    batch_size: Annotated[int, typer.Option(help="Samples per step.")] = 1,
    fused: Annotated[
        bool,
        typer.Option("--fused/--reference", help="Triton kernels (default on CUDA) or the torch references."),
    ] = True,
    log: Annotated[
        Path,
        typer.Option(
            "--log",
            "--log-file",
            help="JSON log of per-step timings and loss (under torchrun write --log-file: torchrun's own "
            "parser takes --log for an abbreviation of its --log-dir). A new run (also --init-from) replaces "
            "an existing file there (warned); a --resume carries the steps of its own run's log over and "
            "refuses another run's.",
        ),
    ] = Path("train_log.json"),
    seed: Annotated[
        int,
        typer.Option(
            help="Seed of the sampler, the crops and the model's initialisation (torch.manual_seed). The same "
            "seed repeats a run only with --in-order or --workers 1: otherwise the samples arrive ready-first "
            "and which ones each step trains on depends on timing.",
        ),
    ] = 0,
    workers: Annotated[
        int,
        typer.Option(
            help="Client workers (see --pool): samples computed at once. With more than 1 they are handed over "
            "ready-first (a slow sample is overtaken by up to 8 later ones), so the batches differ from run to "
            "run; --in-order keeps the stream's order.",
        ),
    ] = 4,
    in_order: Annotated[
        bool,
        typer.Option(
            "--in-order",
            help="Hand the client's samples over in the stream's order, not ready-first: with the same --seed "
            "the run trains on the same batches whatever --workers (on cpu, bitwise; a sample skipped for "
            "passing its deadline still depends on timing). A slow sample then holds up the ones after it.",
        ),
    ] = False,
    pool: Annotated[
        str | None,
        typer.Option(
            "--pool",
            help="Client workers as 'process' (default on cuda) or 'thread' (default on cpu). Worker threads "
            "compete with the training thread for the GIL: 128-token CUDA-graph steps took 7.5 ms (8.7 in "
            "a second round) with threads vs 4.45 ms with processes on an H200 (GPU work 4.0 ms; "
            "benchmarks/results/feed_ab_run71.json).",
        ),
    ] = None,
    pad_multiple: Annotated[
        int | None,
        typer.Option(
            "--pad-multiple",
            help="Pad each batch's token axis up to a multiple of this (capped at --crop) so the Triton "
            "kernels compile once for all crop lengths. Default: 128 on cuda, 1 (off) on cpu.",
        ),
    ] = None,
    compile: Annotated[
        bool,
        typer.Option(
            "--compile",
            help="Run the model under torch.compile: the first step (and the first of each new padded "
            "length) compiles for ~15-25 s, later steps ~8-10 % faster on an H200. For long runs; with "
            "--pad-multiple equal to --crop every batch has one shape and compiles once.",
        ),
    ] = False,
    cuda_graphs: Annotated[
        bool,
        typer.Option(
            "--cuda-graphs",
            help="Replay each step as a CUDA graph (forward, backward, clipping, AdamW), recorded on the "
            "first batch of each padded shape (token length; MSA rows are padded to a power of two): "
            "removes the host's kernel-launch time, which bounds the step at small crops (H200: 22 -> 4.4 ms "
            "for 128 tokens). Same updates as eager steps; costs ~0.1-0.3 s per shape recorded and "
            "~0.2 GiB of memory at crop 384. Combines with --compile.",
        ),
    ] = False,
    prefetch: Annotated[
        bool,
        typer.Option(
            "--prefetch/--no-prefetch",
            help="Fetch, pad and copy the next batch while the GPU runs the step (default), so the "
            "loader's latency hides behind the step; the log's exposed_data_wait_s is what it did not hide.",
        ),
    ] = True,
    model_config: Annotated[
        Path | None,
        typer.Option(
            "--model-config",
            help="Model config JSON: the fields of ModelConfig, in module featurecache.model.config (default: the "
            "reference model). A resumed run takes the checkpoint's.",
        ),
    ] = None,
    lr: Annotated[
        float,
        typer.Option(
            "--lr",
            help="Learning rate of the optimizer: torch's AdamW with its defaults otherwise (betas 0.9, 0.999, "
            "eps 1e-8, weight decay 0.01 on every parameter, LayerNorms and embeddings included); the rate "
            "is constant (no warm-up, no schedule) and the gradient norm is clipped to --clip-grad-norm.",
        ),
    ] = 1e-3,
    clip_grad_norm: Annotated[
        float,
        typer.Option(
            "--clip-grad-norm",
            help="Clip each step's total gradient norm to this (torch's clip_grad_norm_); AF3's 10 by default. "
            "Each step record says whether it was clipped, the summary the share of clipped steps. A resumed "
            "run takes this value, not the checkpoint's, and warns when they differ (checkpoints of runs "
            "before this option clipped at 1.0).",
        ),
    ] = 10.0,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint",
            help="Write a checkpoint here (model, optimizer, the data stream's position) at the end of the run "
            "and every --checkpoint-every steps; '{step}' in the name is replaced by the steps done, otherwise "
            "each checkpoint replaces the last (written to a temporary file and renamed: a crash mid-write "
            "keeps the previous one). A checkpoint due mid-run waits beside its path as .NAME.pending until "
            "the next step's loss is finite; any other end of the run (an error, a signal) moves it into "
            "place, and one left by a killed run is named by the next --resume.",
        ),
    ] = None,
    checkpoint_every: Annotated[
        int | None, typer.Option("--checkpoint-every", help="Steps between checkpoints (needs --checkpoint).")
    ] = None,
    keep_checkpoints: Annotated[
        int | None,
        typer.Option(
            "--keep-checkpoints",
            help="With a '{step}' --checkpoint: keep the last N checkpoints this run wrote, deleting the "
            "oldest after each new one is kept (the log's checkpoints mark them deleted). Never deletes a "
            "file this run did not write: an earlier run's, the --resume or --init-from checkpoint. "
            "Refused (exit 2) below 1 or without '{step}'.",
        ),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            help="Continue from a checkpoint: its model config, parameters, optimizer state and data position "
            "(the same batches follow as if the run had not stopped). --steps is the total, counting the "
            "checkpoint's steps. Refused (exit 2) with another --crop, --seed, --batch-size, --max-atoms or "
            "data setting (--weighting, --crop-weights, --max-msa-rows, --pair-msa, --crop-whole-groups), "
            "or on a store whose entries are not its run's (another store, or the store extended since; "
            "the same store through its lookup service is the same): use --init-from there. A run that stops "
            "early prints the options that continue it.",
        ),
    ] = None,
    init_from: Annotated[
        Path | None,
        typer.Option(
            "--init-from",
            help="Start a new run from a checkpoint's model weights (its model config; a fresh optimizer, "
            "data stream and step count), e.g. when the store has grown since it was written and --resume "
            "cannot continue its data position. Not with --resume; a --checkpoint that would overwrite "
            "this file is refused (exit 2).",
        ),
    ] = None,
    verbose: Verbose = False,
) -> None:
    """Reference training loop: FeatureDataset → Pairformer-style trunk → distogram loss.

    Logs each step's time, data wait and loss to --log (JSON, with a summary; its "fields" block says what \
each step field means and its unit); checkpoints with --checkpoint, continues a run with --resume.

    Optimizer: AdamW (torch defaults: betas 0.9/0.999, weight decay 0.01 on every parameter) at a constant \
--lr, no warm-up or schedule, gradients clipped to --clip-grad-norm (10, AF3's). --seed also seeds the model's initialisation.

    Several GPUs: torchrun --standalone --nproc-per-node 2 -m featurecache.cli train ... --log-file LOG. Each \
rank trains on its share of the sample stream, the gradients are averaged, rank 0 writes LOG and the \
checkpoints, rank r writes LOG's NAME.rank<r>.json.

    Lookup service (--url): its token is --token, else FEATURECACHE_AUTH_TOKEN, else FEATURECACHE_AUTH_TOKEN_FILE (a file holding it). A service that has not answered yet is waited for --service-wait seconds (a wrong URL fails then); once it has answered, a restart of it is waited for.

    Exit status: 0 the run completed (its one-line summary on stdout); 2 usage error (an invalid option or \
model config, no or both of --store/--url, a checkpoint that does not match; before training); 3 fatal (the \\[train] extra is not installed; the \
store or service cannot be read, or the store's first build has not finished; also mid-run: then with --checkpoint a checkpoint of the steps done is \
written and named; a non-finite loss; a log or checkpoint that cannot be written); 130 Ctrl-C and 143 \
SIGTERM (stopped after the current step; the log, and with --checkpoint a checkpoint, written; a line on \
stderr says how to continue).
    """
    _setup_logging(verbose)
    if (store is None) == (url is None):
        typer.secho("error: give exactly one of --store or --url", fg=typer.colors.RED, err=True)
        raise typer.Exit(EXIT_USAGE)
    if token is not None and url is None:
        typer.secho("error: --token is for a lookup service (--url)", fg=typer.colors.RED, err=True)
        raise typer.Exit(EXIT_USAGE)
    _require_extra("train")
    from featurecache.model.config import ModelConfig
    from featurecache.model.train import (
        describe_log,
        describe_run,
        parse_crop_weights,
        rank_log_path,
        run_training,
    )

    said: list[str] = []

    def on_signal(doc: dict[str, object]) -> None:
        """A signal stopped the run: say how it went and how to continue before the signal is handed
        on (SIGTERM then ends the process, exit status 143; SIGINT comes back as KeyboardInterrupt)."""
        rank = doc.get("rank")
        said.append(describe_run(doc, rank_log_path(log, rank if isinstance(rank, int) else 0)))
        typer.secho(said[-1], fg=typer.colors.YELLOW, err=True)

    try:
        config = ModelConfig.from_json(model_config) if model_config is not None else None
        weights = parse_crop_weights(crop_weights)
        doc = run_training(
            store=store, url=url, steps=steps, crop_size=crop, device=device, batch_size=batch_size,
            fused=fused, log_path=log, seed=seed, workers=workers, pad_multiple=pad_multiple, compile=compile,
            cuda_graphs=cuda_graphs, prefetch=prefetch, pool=pool, lr=lr, clip_grad_norm=clip_grad_norm,
            checkpoint=checkpoint, checkpoint_every=checkpoint_every, resume=resume, config=config, token=token,
            max_atoms=max_atoms,
            init_from=init_from, before_signal=on_signal, service_wait=service_wait if url is not None else None,
            weighting=weighting, crop_weights=weights, max_msa_rows=max_msa_rows, pair_msa=pair_msa,
            crop_whole_groups=crop_whole_groups, in_order=in_order,
            return_steps=False, keep_checkpoints=keep_checkpoints,  # (the summary line needs the last record: a long run's are not read back)
        )  # fmt: skip
    except FeatureCacheError as exc:
        raise _fatal(exc) from exc
    except KeyboardInterrupt:  # Ctrl-C: the run stopped after its step (twice: at once)
        if not said:  # a second Ctrl-C, or one before the run began
            typer.secho(describe_log(log) or "interrupted (Ctrl-C) before the first step",
                        fg=typer.colors.YELLOW, err=True)  # fmt: skip
        raise typer.Exit(130) from None
    typer.echo(describe_run(doc, log if doc.get("rank", 0) == 0 else None))


@app.command(cls=_Command)
def report(
    store: Annotated[Path, _store_argument("Store directory.")],
    out: Annotated[Path, typer.Option("--out", help="Output directory for index.html, PNGs, CSV/JSON.")],
    train_log: Annotated[
        Path | None,
        typer.Option("--train-log", help="JSON log of `featurecache train` for the loader timeline."),
    ] = None,
) -> None:
    """Write an HTML report (plots + the numbers behind them) of what is in a store. On a store whose
    first build has not finished it warns (stderr, and on the page): the report is partial.

    Exit status: 0 written; 2 usage error; 3 the store is missing or unreadable, --out cannot be written, or the \
\\[report] extra is not installed.
    """
    _require_extra("report")
    from featurecache.report import write_report

    unfinished = _first_build_unfinished(store)
    try:
        path = write_report(store, out, train_log=train_log)
    except FeatureCacheError as exc:
        raise _fatal(exc) from exc
    typer.echo(f"report written: {path}")
    if unfinished:  # the report's page and summary.json say so too
        _warn_unfinished(store, "the report covers only part of the store, its counts and plots are partial")
    _warn_plan(store)


def _warn_plan(store: Path) -> None:
    """One line on stderr for each way the store's plan (index/plan.arrow) is not the store's: made
    while its first build had not finished, or older than the index (entries added, removed or
    changed since, as ``featurecache.plan.fitting_ids`` warns); the report's memory-plan section
    says so too."""
    from featurecache.plan.planner import plan_path, read_plan, stale_against_index, unfinished_plan_warning

    if not plan_path(store).is_file():
        return
    where = f"{store}: its plan ({plan_path(store).name})"
    try:
        table = read_plan(store)
        lines = [unfinished_plan_warning(table, where), stale_against_index(store, table, where)]
    except (FeatureCacheError, OSError):  # unreadable: the store's reader said so, and left it out
        return
    for line in lines:
        if line:
            typer.secho(f"warning: {line}", fg=typer.colors.YELLOW, err=True)


@app.command(cls=_Command)
def plan(
    store: Annotated[Path, _store_argument("Store directory.")],
    model_config: Annotated[
        Path | None, typer.Option("--model-config", help="Model config JSON (default: the reference model).")
    ] = None,
    gpu_memory: Annotated[
        str,
        typer.Option(
            "--gpu-memory",
            help="The GPU's memory, e.g. 80GiB, 141GB, or bytes (8e9; "
            "below 64 MiB is refused as a missing unit); --headroom of it is kept free.",
        ),
    ] = "80GiB",
    fused: Annotated[
        bool, typer.Option("--fused/--reference", help="Plan for the Triton kernels or the torch references.")
    ] = True,
    write_index: Annotated[
        bool,
        typer.Option(
            "--write-index/--no-write-index",
            help="Write the plan (predicted peak per entry and crop, the recommended crop) to the store as "
            "index/plan.arrow (entries.arrow is not changed); on a read-only store the summary is still printed.",
        ),
    ] = True,
    headroom: Annotated[
        float, typer.Option(help="Share of GPU memory kept free (allocator fragmentation, CUDA context).")
    ] = 0.08,
    pad_multiple: Annotated[
        int,
        typer.Option(
            "--pad-multiple",
            help="Token padding of a training step, as `featurecache train --pad-multiple` (128 on cuda; 1: none).",
        ),
    ] = 128,
) -> None:
    """Predict peak training memory per entry from the index alone; recommend a token budget.

    It plans `featurecache train`'s step: batch 1, crops of 384, 640 and 768 tokens, at most 1024 MSA rows \
(train's --max-msa-rows default), bf16 autocast, the model of --model-config.

    On a store whose first build has not finished it warns (stderr) and marks the written plan so: \
featurecache.plan.fitting_ids and `featurecache report` then warn that the plan is partial.

    Exit status: 0 planned; 2 usage error (e.g. a --gpu-memory without a unit, a model config that cannot be \
read or is invalid); 3 the store is missing or unreadable, or the plan cannot be written (the summary is \
printed first).
    """
    from featurecache.plan import run_plan

    unfinished = _first_build_unfinished(store)
    try:
        run_plan(
            store,
            model_config=model_config,
            gpu_memory=gpu_memory,
            fused=fused,
            write_index=write_index,
            headroom=headroom,
            pad_multiple=pad_multiple,
        )
    except FeatureCacheError as exc:
        raise _fatal(exc) from exc
    if unfinished:
        marked = " (index/plan.arrow records this: fitting_ids and `report` warn)" if write_index else ""
        _warn_unfinished(
            store,
            "the plan's counts are partial and its memory predictions may be low, because entries, MSAs or "
            f"conformers written later are missing from it{marked}. Plan again once the build has finished",
        )


if __name__ == "__main__":
    app()
