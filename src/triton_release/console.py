"""Presentation: plain lines on a terminal, workflow commands inside GitHub Actions.

Steps return typed results; this module alone turns them into lines. One method per kind of
result (`validation`, `changes`, `golden_run`, `pushed` ...), used by the single commands and
by `release` alike, so the two can never drift. Warnings logged by domain code (the
`triton_release` logger) arrive here too. Secrets given to `mask` never leave it.

Text that users and models wrote (file names, a model's error message, a server's log lines) is
shown, never obeyed: every line printed has its control characters escaped (`escape_controls`),
so none colours, moves the cursor or rewrites a line; a model's text is kept on the line that
shows it (its line feeds escaped too); and in Actions no line of it becomes a workflow command
(`defuse_commands`).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from triton_release.problems import Problem, display_path
from triton_release.progress import LiveBars, PlainLines, Reporter, reporting
from triton_release.signals import stop

if TYPE_CHECKING:  # the results this console renders; never imported at run time
    from triton_release.errors import TritonReleaseError


def escape_data(text: str) -> str:
    """A workflow command's message, as GitHub specifies: %, CR and LF escaped."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (file=...): also ':' and ','."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


_CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")  # C0 but tab, DEL, C1
_CONTROLS_BUT_LF = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escaped(match: re.Match) -> str:
    char = match.group()
    return _NAMED.get(char) or f"\\x{ord(char):02x}"


def escape_controls(text: str, lines: bool = False) -> str:
    """Text written by a user or a model as a log may show it: each control character (C0 but
    tab, DEL, C1: ESC, CR, backspace, NEL ...) written as Python writes it in a string, `\\x1b`,
    `\\r`, `\\n`, so that none colours, moves the cursor, rewrites a line or starts one. With
    `lines`, line feeds stay (text of several lines that the tool itself wrote)."""
    return (_CONTROLS_BUT_LF if lines else _CONTROLS).sub(_escaped, text)


def defuse_commands(line: str) -> str:
    """One line of user text that the Actions runner would obey as a workflow command, made inert
    and still readable. The runner takes a line as a command when, after leading white space, it
    starts with '::' (`::error::`, `::set-output name=..::`, `::stop-commands::`), or when it holds
    '##[' anywhere (the older syntax): the first ':' of such a line is written `\\x3a`, and every
    '##[' as '#\\x23['. Escaping is stateless, so it holds whatever came before; ::stop-commands::
    would need a token per block and would also silence the tool's own annotations after a crash."""
    line = line.replace("##[", "#\\x23[")
    stripped = line.lstrip()
    if stripped.startswith("::"):
        line = line[: len(line) - len(stripped)] + "\\x3a" + stripped[1:]
    return line


class Console:
    """Human lines go to stdout, or to stderr when stdout carries the JSON report."""

    def __init__(
        self, *, json_mode: bool = False, ci: bool = False, out: TextIO | None = None, err: TextIO | None = None
    ) -> None:
        self.err = err or sys.stderr
        self.out = self.err if json_mode else (out or sys.stdout)
        self.ci = ci
        self._secrets: list[str] = []
        self._live: LiveBars | None = None  # the bars on the terminal, while a step runs

    # -- the basics ---------------------------------------------------------------------------

    def mask(self, secret: str) -> None:
        """Never print `secret` (nor any of its lines); in Actions, have the runner mask it too."""
        for part in {secret, *secret.splitlines()}:
            if part.strip():
                self._secrets.append(part)
                if self.ci:
                    print(f"::add-mask::{escape_data(part)}", file=self.out, flush=True)
        self._secrets.sort(key=len, reverse=True)

    def _masked(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _print(self, text: str, stream: TextIO | None = None) -> None:
        stream = stream or self.out
        text = escape_controls(self._masked(text), lines=True)  # every line written: no control character
        try:
            if self._live is None:
                print(text, file=stream, flush=True)
                return
            with self._live.paused():  # a line printed under a live bar: the bar moves below it
                print(text, file=stream, flush=True)
        except BrokenPipeError:
            self._closed(stream)

    def _closed(self, stream: TextIO) -> None:
        """The reader of `stream` went away (`release | head -1`): what follows goes nowhere, and
        the run stops as a SIGPIPE would, undoing what it does on any interruption."""
        devnull = open(os.devnull, "w")
        try:
            os.dup2(devnull.fileno(), stream.fileno())  # nor does Python's last flush fail at exit
        except (OSError, ValueError):
            pass
        if stream is self.out:
            self.out = devnull
        if stream is self.err:
            self.err = devnull
        stop("SIGPIPE", 128 + signal.SIGPIPE)

    def _text(self, text: str, stream: TextIO | None = None) -> None:
        """Lines that may hold user text (file names, model messages): in Actions, none of them may
        be a workflow command, however the text was made (a CR starts no line: it is escaped)."""
        if self.ci:
            text = "\n".join(defuse_commands(line) for line in text.split("\n"))
        self._print(text, stream)

    def line(self, text: str = "") -> None:
        self._text(text)

    def warning(self, message: str, problem: Problem | None = None) -> None:
        self._text(f"warning: {problem or message}")
        if self.ci:
            self._print(
                f"::warning{self._where(problem)}::{escape_data(self._masked(problem.message if problem else message))}"
            )

    def problem(self, problem: Problem) -> None:
        self._text(str(problem))
        if self.ci:
            self._print(f"::error{self._where(problem)}::{escape_data(self._masked(problem.message))}")

    @staticmethod
    def _where(problem: Problem | None) -> str:
        if problem is None:
            return ""
        props = f"file={escape_property(display_path(problem.path))}"
        if problem.line:
            props += f",line={problem.line}"
            if problem.col:
                props += f",col={problem.col}"
        return " " + props

    def failure(self, error: TritonReleaseError | str, details: Sequence[str] = ()) -> None:
        message = error if isinstance(error, str) else error.message
        for line in details or getattr(error, "details", ()):
            self._text(line)
        self._text(message, self.err)
        if self.ci:
            self._print(f"::error::{escape_data(self._masked(message))}", self.err)

    @contextmanager
    def group(self, title: str, timed: bool = False) -> Iterator[None]:
        """A folded log group in Actions; with `timed`, a closing line with the step's time."""
        if self.ci:
            self._print(f"::group::{title}")
        start = time.perf_counter()
        ok = False
        try:
            yield
            ok = True
        finally:
            if self.ci:
                self._print("::endgroup::")
        if timed and ok:
            self._print(f"{title}: done in {time.perf_counter() - start:.1f} s")

    @contextmanager
    def progress(self) -> Iterator[Reporter]:
        """Where the step's long parts (requirements, layers, push, loading, cases) show progress for
        the block's duration: a live bar on a terminal; in Actions, or into a file or pipe, plain
        lines, at most one every few seconds per task (inside the step's group)."""
        live = not self.ci and _terminal(self.out)
        reporter = LiveBars(self.out) if live else PlainLines(self.line)
        outer, self._live = self._live, reporter if isinstance(reporter, LiveBars) else self._live
        try:
            with reporting(reporter):
                yield reporter
        finally:
            reporter.close()
            self._live = outer

    @contextmanager
    def logging_to_console(self) -> Iterator[None]:
        """Warnings that domain code logs become console warnings for the duration."""
        logger = logging.getLogger("triton_release")
        handler = _ConsoleHandler(self)
        logger.addHandler(handler)
        logger.propagate = False
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.propagate = True

    # -- results ------------------------------------------------------------------------------

    def settings(self, settings) -> None:
        for warning in settings.warnings:
            self.warning(warning)

    def validation(self, result) -> None:
        for warning in result.warnings:
            self.warning(warning.message, warning)
        for problem in result.problems:
            self.problem(problem)
        if result.ok:
            self.line(f"{result.root}: {len(result.models)} models, {result.golden_cases} golden cases, no problems")

    def changes(self, result) -> None:
        found = result.found
        for name, change in sorted(found.models.items()):
            self.line(f"{name}: {change.status}; {'; '.join(change.reasons)}")
        for name in found.ensembles:
            self.line(f"{name}: ensemble using a changed model; tested, not bumped")
        for name in found.callers:
            self.line(f"{name}: calls a changed model (BLS); tested, not bumped")
        if not found.models:
            self.line("no model changed")
        plan = result.plan
        if plan is None:
            self.line(f"release: {result.kind.kind or 'none'} ({'; '.join(result.kind.reasons)})")
        else:
            self.line(
                f"release: {result.kind.kind or 'nothing'} -> {plan.version or '(none)'} "
                f"(previous: {plan.previous or 'none'}; base: {result.base_from})"
            )

    def recovered(self, result) -> None:
        if result is None:
            return
        what = {
            "undone": "its bump was never published: undone",
            "kept": "its release was published: its bump is kept for the release commit",
            "tagged": "its release commit is there: tagged",
            "gone": "a checkout since removed it",
        }[result.action]
        self.line(
            f"a run ({result.owner}) was stopped during {result.phase} with its bump in "
            f"{', '.join(result.folders)}; {what}"
        )

    def bumped(self, result) -> None:
        for bump in result.bumps:
            self.line(
                f"{result.prefix}/{bump.model}/{bump.to_version}: new version folder with the head contents; "
                f"version {bump.from_version} restored to its released contents"
            )
        for item in result.carried:
            where = f"{result.prefix}/{item.model}/{item.version}"
            self.line(
                f"{where}: carried from {item.release}, which shipped it "
                + (
                    "with other contents than the checkout holds (its bump was never committed)"
                    if item.at_head
                    else "and the checkout lacks it (its bump was never committed)"
                )
            )
        if not result.bumps:
            self.line("no version folder to bump")

    def exported(self, result) -> None:
        if result.in_place:
            self.line(
                f"building and testing commit {result.commit[:12]} with the new version folders in place: "
                "the checkout is exactly that"
            )
        else:
            self.line(
                f"building and testing commit {result.commit[:12]} with the new version folders, unpacked"
                + (f" ({result.unpacked_because})" if result.unpacked_because else "")
            )
        if result.uncommitted:
            self.warning(f"not released, because not committed: {', '.join(result.uncommitted)}")

    def environments(self, result) -> None:
        envs = result.environments
        if len(envs.by_model) > 10:
            self.line(
                f"{len(envs.by_model)} models in their own environments, of {len(envs.distributions)} "
                "distributions (the report lists them)"
            )
        else:
            for model, env in sorted(envs.by_model.items()):
                packages = ", ".join(f"{name} {version}" for name, version in sorted(env.packages.items()))
                self.line(f"{model}: its own environment, {packages or 'no packages'}")
        for model in result.changed:
            self.line(f"{model}: environment changed since {result.compared_with}: tested, not bumped")

    def signatures(self, result) -> None:
        self.line(
            f"auto-complete models' signatures, as served, labelled ({', '.join(sorted(result.signatures))}); "
            f"release {result.version} ({result.kind.kind})"
        )

    def built(self, result) -> None:
        for warning in result.warnings:
            self.warning(warning)
        self.line(result.summary())

    def golden_run(self, run) -> None:
        on_cpu = set(getattr(run, "on_cpu", ()))
        for case in run.cases:  # a case's message holds the model's own text: kept on its line
            where = ", tested on CPU" if case.case.split("/", 1)[0] in on_cpu else ""
            self.line(
                f"{'PASS' if case.passed else 'FAIL'} {case.case} ({case.latency_ms:.1f} ms{where})"
                + (f": {escape_controls(case.message)}" if case.message else "")
            )
        for name in run.untested:
            self.warning(f"{name} has no golden cases; it loaded, nothing more is proven")
        for name, why in getattr(run, "needs_gpu", ()):
            self.warning(f"{name} was not tested: needs a GPU: {why}")
        if on_cpu:
            self.line(f"tested on CPU (KIND_GPU instance groups loaded as KIND_CPU): {', '.join(sorted(on_cpu))}")
        for case in run.failed:
            self.problem(Problem(Path(case.path), f"{case.case}: {escape_controls(case.message)}"))
        if len(run.waves) > 1:
            for wave in run.waves:
                over = " (more than max_loaded: an ensemble and what it needs)" if wave.oversized else ""
                self.line(
                    f"wave {wave.index}/{len(run.waves)}: {len(wave.loaded)} models loaded{over}, "
                    f"{wave.cases} cases, {wave.seconds:.1f} s"
                )
        if run.peak_memory_bytes:
            self.line(f"server peak memory: {run.peak_memory_bytes / (1 << 20):.0f} MiB")
        if run.passed:
            self.line(f"{len(run.cases)} golden cases passed in {run.image}")
        self.drift(getattr(run, "drift", ()))
        self.latency(getattr(run, "latency", None))

    def drift(self, drifts) -> None:
        """One line per model with a new version: its largest difference from the version before."""
        from triton_release.models.drift import show_fraction

        for found in drifts:  # notes and output names come from the server: each line kept one line
            if not found.compared:
                self.line(escape_controls(f"drift {found.model}: not compared: {found.note}"))
                continue
            changed = "".join(
                f"; {kind} in {found.version}: {', '.join(names)} (not compared)"
                for kind, names in (("new outputs", found.new_outputs), ("outputs gone", found.gone_outputs))
                if names
            )
            worst = found.worst
            if worst is None:
                self.line(
                    escape_controls(
                        f"drift {found.model} {found.previous} -> {found.version}: no output "
                        f"compared ({'; '.join(found.skipped[:2]) or 'no case'}){changed}"
                    )
                )
                continue
            beyond = max(o.cases_beyond_tolerance for o in found.outputs)
            size = f", max abs diff {worst.max_abs_diff:.3g}" if worst.max_abs_diff is not None else ""
            self.line(
                escape_controls(
                    f"drift {found.model} {found.previous} -> {found.version}: up to "
                    f"{show_fraction(found.max_rel_diff)} ({worst.name}{size}) over {found.cases} case(s), "
                    + (f"BEYOND TOLERANCE in {beyond}" if beyond else "within tolerance")
                    + changed
                    + (f"; {len(found.skipped)} not compared (the report says why)" if found.skipped else "")
                )
            )

    def latency(self, found) -> None:
        """The latency gate: per model with a new version, both versions' figures, the ratio and its
        interval, the verdict; cold starts; what was not measured and why."""
        if found is None:
            return
        if found.note:
            self.line(escape_controls(f"latency: {found.note}"))
        bound = f"max_latency_increase {found.bound:g}" if found.bound is not None else "no bound: reported only"
        for model in found.models:
            if not model.measured:
                self.line(escape_controls(f"latency {model.model}: {model.note or 'not measured'}"))
                continue
            for c in model.comparisons:
                self.line(
                    escape_controls(
                        f"latency {model.model} {model.previous} -> {model.version} (concurrency {c.concurrency}, "
                        f"{c.pairs} rounds each): p50 {c.before.p50_us / 1000:.2f} -> {c.after.p50_us / 1000:.2f} ms, "
                        f"p99 {c.before.p99_us / 1000:.2f} -> {c.after.p99_us / 1000:.2f} ms, throughput "
                        f"{c.before.throughput:.0f} -> {c.after.throughput:.0f} infer/s; p50 ratio {c.p50.shown()}: "
                        f"{c.verdict.upper() if c.verdict != 'measured' else 'measured'} ({bound})"
                    )
                )
            if model.verdict == "inconclusive":
                self.warning(
                    f"latency {model.model}: inconclusive: the p50 ratio's interval straddles "
                    f"1 + {found.bound:g}; run more rounds (--latency-rounds, now {found.rounds}) or on a "
                    "quieter runner to decide"
                )
            if len(model.cold_start) == 2:
                before, after = model.cold_start
                self.line(
                    f"latency {model.model} cold start: load {_seconds(before.load_s)} -> "
                    f"{_seconds(after.load_s)}, first request {_ms(before.first_request_ms)} -> "
                    f"{_ms(after.first_request_ms)}"
                )
            for warning in model.warnings:
                self.warning(escape_controls(warning))

    def recorded(self, result) -> None:
        for path in result.written:
            self.line(
                f"{path}: answers recorded from {result.image} (outputs, or the error text a case expects); "
                "review them before you commit"
            )
        if not result.written:
            self.line("every case already has outputs (use --overwrite to record them again)")

    def pushed(self, result) -> None:
        self.line(
            f"pushed {result.repository}:{result.version} ({result.digest}); {result.layers_uploaded} layers "
            f"uploaded, {result.layers_mounted + result.layers_present} already in the registry"
        )

    def evidence(self, result) -> None:
        from triton_release.evidence.statements import KINDS

        kinds = ", ".join(KINDS.get(layer.predicate_type, layer.predicate_type) for layer in result.layers)
        how = " (its golden cases run again: the run that pushed it stopped before)" if result.how == "rerun" else ""
        self.line(
            f"evidence of {result.repository}@{result.digest}{how}: {kinds} as "
            f"{result.repository}:{result.tag} ({result.bytes} bytes), {result.signed_by}"
        )
        if result.signing == "none":
            self.warning(
                "the evidence is unsigned: give a signing key (--signing-key, the action's signing-key) "
                "so that `triton-release verify --key` and admission policies can trust it"
            )

    def evidence_checked(self, result) -> None:
        for found in result.found:
            state = "verified" if not found.problems else "; ".join(found.problems)
            self.line(f"{found.predicate_type}: {state}")
        if result.ok:
            self.line(
                f"the evidence of {result.repository}@{result.digest} verifies with {result.key}: "
                f"{len(result.found)} statements, every golden case passed"
            )

    def tagged(self, result) -> None:
        self.line(
            f"tags {', '.join(result.tags)} -> {result.version} (the channel pointed at "
            f"{result.channel_before or 'nothing'} before)"
        )

    def shards_planned(self, result) -> None:
        for shard in result.shards:
            loads = (
                f", also loads {', '.join(m for m in shard.load if m not in shard.models)}"
                if len(shard.load) > len(shard.models)
                else ""
            )
            self.line(
                f"{shard.name}: {len(shard.models)} models, {shard.cases} golden cases"
                f"{', needs a GPU runner' if shard.gpu else ''} ({', '.join(shard.models)}{loads})"
            )

    def candidate_pushed(self, result) -> None:
        candidate = result.candidate
        self.line(
            f"staged {candidate.ref} as {candidate.repository}:{result.tag} (release "
            f"{candidate.version or 'none'} once every shard passed); {result.layers_uploaded} layers "
            f"uploaded, {result.layers_present} already in the registry"
        )

    def candidate_reused(self, result) -> None:
        if result is not None:
            candidate = result.candidate
            self.line(
                f"{candidate.repository}:{result.tag} was staged from this commit and base before: reused "
                f"{candidate.ref}, {len(candidate.shards)} shards (nothing built, nothing pushed)"
            )

    def candidate_pulled(self, result) -> None:
        self.line(f"pulled {result.ref} (built from {result.revision[:12] or 'an unlabelled commit'})")

    def golden_recorded(self, result) -> None:
        self.line(
            f"{result.shard}: {'passed' if result.passed else 'FAILED'} ({result.cases} cases), recorded as "
            f"{result.repository}:{result.tag}"
        )

    def candidate_checked(self, result) -> None:
        records = dict(result.records)
        for shard in result.candidate.shards:
            record = records.get(shard.name)
            state = (
                "no record"
                if record is None
                else "record of another candidate"
                if record.candidate != result.candidate.digest
                else "passed"
                if record.passed
                else f"FAILED ({', '.join(record.failed_cases) or record.reason or 'before any case'})"
            )
            self.line(f"{shard.name}: {state} ({', '.join(shard.models)})")
        if result.ok:
            self.line(
                f"{result.candidate.ref}: every shard passed, covering the changed models "
                f"({len(result.candidate.changed)}); planned as {result.candidate.version}"
            )

    def promoted(self, result) -> None:
        again = " (X.Y.Z was this candidate already: the other tags were finished)" if result.resumed else ""
        self.line(
            f"released {result.repository}:{result.version} ({result.digest}){again}; tags "
            f"{', '.join(result.tags)} (the channel pointed at {result.channel_before or 'nothing'} before)"
        )

    def candidates_retained(self, result) -> None:
        for tag in result.deleted:
            self.line(f"deleted {result.repository}:{tag}, a candidate older than the release, and its records")
        if result.released:
            many = len(result.released) > 1
            self.line(
                f"kept {len(result.released)} older candidate tag{'s' if many else ''} "
                f"({', '.join(result.released[:3])}{', ...' if len(result.released) > 3 else ''}): "
                f"{'releases are their manifests' if many else 'a release is its manifest'}, which deleting "
                "would delete"
            )

    def not_released(self, why: str) -> None:
        self.line(why)

    def waiting(self, holder: str) -> None:
        self.line(f"{holder} is running on this machine; waiting for it")

    def finished(self, result) -> None:
        if result.tags:
            self.line(f"finished the interrupted release {result.version}: tags {', '.join(result.tags)}")

    def retained(self, result) -> None:
        for version in result.deleted:
            self.line(f"deleted {result.repository}:{version} (--keep {result.keep})")

    def committed(self, result) -> None:
        if result is None:
            return
        self.line(
            f"{'committed the new version folders and ' if result.committed else ''}tagged {result.tag} "
            f"({result.commit[:12]})"
        )

    def rolled_back(self, result) -> None:
        self.line(
            f"{result.repository}:{result.channel} -> {result.version} ({result.digest}); it pointed at "
            f"{result.previous_digest or 'nothing'} before (roll forward with that digest)"
        )

    def model_rolled_back(self, result) -> None:
        self.line(f"{result.server}: {result.model} now serves version {result.version} only")


def _terminal(stream: TextIO) -> bool:
    """Whether a live bar can be drawn on `stream`: a terminal, with a size (a pseudo-terminal
    nobody sized is 0 by 0)."""
    try:
        if not stream.isatty():
            return False
    except (AttributeError, ValueError):  # no such method, or a closed stream
        return False
    try:
        return min(os.get_terminal_size(stream.fileno())) > 0
    except (OSError, ValueError):  # a stream without a file descriptor: its word, then
        return True


class _ConsoleHandler(logging.Handler):
    def __init__(self, console: Console) -> None:
        super().__init__(logging.WARNING)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        self.console.warning(record.getMessage())


def _seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f} s"


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f} ms"
