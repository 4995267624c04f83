"""``tether eval``: run BFCL or the scenario suite under ablation presets, report, compare.

Mount with ``app.add_typer(eval_app, name="eval")``. Usage::

    tether eval --suite bfcl:simple,multiple --preset bare,strict --limit 100 --seed 0
    tether eval --suite scenarios --preset bare,names,full
    tether eval --suite bfcl:irrelevance --base-url http://127.0.0.1:9000/v1 --preset bare,strict
    tether eval compare results/eval/bfcl-simple.bare.jsonl results/eval/bfcl-simple.full.jsonl
    tether eval report results/eval/*.jsonl --html report.html
    tether eval scenarios
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as Bar

from tether.engine.llama_options import parse_gpu_layers
from tether.errors import TetherError
from tether.evals.client import PRESET_NAMES, ChatClient
from tether.evals.local import Target, open_client
from tether.evals.records import ItemRecord, ResultStore, load_records
from tether.evals.report import markdown_summary, print_comparison, print_summary
from tether.evals.runner import Progress, RunPlan, run_plan
from tether.evals.suites import EvalItem, RunOptions, load_items, suite_name

__all__ = ["eval_app"]

eval_app = typer.Typer(
    rich_markup_mode=None,
    help="Evaluate tool calling: BFCL and the scenario suite, bare vs guarded presets.",
    add_completion=False,
)
DEFAULT_OUT = "results/eval/{suite}.{preset}.jsonl"


def _fail(message: str) -> None:
    typer.echo(f"tether eval: error: {message}", err=True)
    raise typer.Exit(code=2)


def _presets(spec: str) -> list[str]:
    presets = [p.strip() for p in spec.split(",") if p.strip()]
    bad = [p for p in presets if p not in PRESET_NAMES]
    if bad or not presets:
        _fail(f"unknown preset(s) {bad or spec!r}; choose from {', '.join(PRESET_NAMES)}")
    return list(dict.fromkeys(presets))


def _html_path(out: str, suite: str) -> Path:
    path = Path(out.replace("{suite}", suite).replace("{preset}", "report"))
    return path.with_suffix(".html")


@eval_app.callback(invoke_without_command=True)
def run(
    ctx: typer.Context,
    suite: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SUITE",
            help="bfcl:<categories> (simple, multiple, parallel, irrelevance, live, multi_turn, ...) "
            "or scenarios[:tiers].",
        ),
    ] = None,
    preset: Annotated[
        str, typer.Option(help="Comma-separated presets: " + ", ".join(PRESET_NAMES))
    ] = "bare,strict",
    limit: Annotated[
        int | None, typer.Option(help="Seeded subset: at most N items per category / tier.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the subset and of sampling (run r uses seed + r).")] = 0,
    split: Annotated[
        str,
        typer.Option(
            help="BFCL items: test (the published 100 per category, seed 0), dev (all others, for tuning) or all."
        ),
    ] = "all",
    item: Annotated[
        list[str] | None,
        typer.Option(
            metavar="ID",
            help="Only these items of the selection (repeatable): re-run the ones a report names.",
        ),
    ] = None,
    runs: Annotated[int, typer.Option(min=1, help="Repeat every item this many times.")] = 1,
    concurrency: Annotated[int, typer.Option(min=1, help="Items in flight at once.")] = 1,
    base_url: Annotated[
        str | None,
        typer.Option(help="An OpenAI-compatible server (…/v1). Default: the embedded engine in-process."),
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(envvar="TETHER_EVAL_API_KEY", help="Bearer key for --base-url.")
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            help="Run tether's pipeline in-process and forward generation to this server, as "
            "`tether serve --backend` does (llama-server, vLLM, Ollama, OpenAI-compatible)."
        ),
    ] = None,
    backend_kind: Annotated[
        str,
        typer.Option(help="What --backend is: auto | llama-server | vllm | ollama | openai."),
    ] = "auto",
    model: Annotated[
        str | None,
        typer.Option(help="GGUF path (embedded) or model id (--base-url). Default: bundled / first listed."),
    ] = None,
    ctx_size: Annotated[int, typer.Option("--ctx", help="Embedded engine context window.")] = 8192,
    slots: Annotated[int | None, typer.Option(help="Embedded engine slots (default: --concurrency).")] = None,
    threads: Annotated[int | None, typer.Option(help="Embedded engine CPU threads.")] = None,
    gpu_layers: Annotated[
        str,
        typer.Option(
            metavar="all|N",
            help="Embedded engine layers on the GPU: 'all' or N (0: CPU), as `tether serve --gpu-layers`.",
        ),
    ] = "0",
    temperature: Annotated[float, typer.Option(help="Sampling temperature for every request.")] = 0.0,
    max_tokens: Annotated[
        int, typer.Option(help="max_tokens of every request (same for every preset).")
    ] = 512,
    out: Annotated[
        str, typer.Option(help="JSONL path template; {suite} and {preset} are filled in.")
    ] = DEFAULT_OUT,
    html: Annotated[
        str | None, typer.Option(help="HTML report path (default: next to the JSONL files).")
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show the live progress bar.")] = True,
) -> None:
    """Run a suite under one or more presets (the default command)."""
    if ctx.invoked_subcommand is not None:
        return
    if not suite:
        typer.echo(ctx.get_help())
        raise typer.Exit(code=2)
    presets = _presets(preset)
    if len(presets) > 1 and "{preset}" not in out:
        _fail("--out needs {preset} when several presets run")
    from tether.logging import configure_logging

    configure_logging("warning")
    try:
        layers = parse_gpu_layers(gpu_layers)
    except TetherError as exc:
        _fail(exc.message)
        return
    if backend and base_url:
        _fail("--backend and --base-url exclude each other: --base-url evaluates a server as it is")
    if backend_kind not in ("auto", "llama-server", "vllm", "ollama", "openai"):
        _fail(f"--backend-kind must be auto, llama-server, vllm, ollama or openai, not {backend_kind!r}")
    target = Target(
        backend=backend,
        backend_kind=backend_kind,
        base_url=base_url,
        api_key=api_key,
        model=model,
        n_ctx=ctx_size,
        slots=slots or concurrency,
        threads=threads,
        gpu_layers=layers,
    )
    options = RunOptions(temperature=temperature, max_tokens=max_tokens)
    console = Console(stderr=True)
    try:
        plans: list[Plan] = []
        wanted = set(item or ())
        for spec in suite:
            name = suite_name(spec)
            items = load_items(spec, limit=limit, seed=seed, split=split)
            if wanted:
                items = [i for i in items if i.item_id in wanted]
            stores = {p: ResultStore(out.replace("{suite}", name).replace("{preset}", p)) for p in presets}
            plans.append((spec, name, items, stores))
        if missing := wanted - {i.item_id for _, _, items, _ in plans for i in items}:
            _fail(f"--item names no item of the selection: {', '.join(sorted(missing))}")
        asyncio.run(_run_all(target, plans, presets, runs, seed, concurrency, options, console, progress))
    except TetherError as exc:
        _fail(exc.message)
    for spec, name, _, stores in plans:
        groups = {p: stores[p].records for p in presets}
        console.print(f"[bold]{spec}[/bold]: " + ", ".join(str(stores[p].path) for p in presets))
        print_summary(groups, console)
        _write_html(Path(html) if html else _html_path(out, name), groups, spec, target.base_url)


Plan = tuple[str, str, list[EvalItem], dict[str, ResultStore]]


async def _run_all(
    target: Target,
    plans: list[Plan],
    presets: list[str],
    runs: int,
    seed: int,
    concurrency: int,
    options: RunOptions,
    console: Console,
    show: bool,
) -> None:
    pending = sum(
        stores[p].done((item.category, item.item_id, p, run)) is None
        for _, _, items, stores in plans
        for item in items
        for run in range(runs)
        for p in presets
    )
    if not pending:  # everything is in the stores already: no engine to load
        console.print("every item is already in the output files; nothing to run")
        return
    async with open_client(target) as client:
        if client.kind != "tether" and any(p != "bare" for p in presets):
            console.print(
                "[yellow]not a tether server: guarded presets apply tether.guardrails client-side "
                "(no layer-0 grammar, no re-pick or argument repair)[/yellow]"
            )
        for spec, _, items, stores in plans:
            plan = RunPlan(
                items, presets, stores, runs=runs, seed=seed, concurrency=concurrency, options=options
            )
            await _with_progress(client, plan, spec, console, show)


async def _with_progress(client: ChatClient, plan: RunPlan, spec: str, console: Console, show: bool) -> None:
    state = Progress()
    if not show:
        await run_plan(client, plan, state)
        return
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[acc]}"),
    )
    with Bar(*columns, console=console) as bar:
        task = bar.add_task(spec, total=None, acc="")

        def update(p: Progress, _: ItemRecord) -> None:
            bar.update(task, total=p.total, completed=p.done, acc=p.accuracy_line())

        state.on_record = update
        await run_plan(client, plan, state)


def _write_html(path: Path, groups: dict[str, list[ItemRecord]], title: str, base_url: str | None) -> None:
    from tether.evals.html import html_report

    if not any(groups.values()):
        return
    notes = []
    if base_url:
        notes.append(f"Server: {base_url}.")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        html_report(
            groups, baseline="bare" if "bare" in groups else None, title=f"tether eval · {title}", notes=notes
        ),
        encoding="utf-8",
    )
    typer.echo(f"report: {path}", err=True)


def _label(path: Path, records: list[ItemRecord]) -> str:
    presets = {r.preset for r in records}
    return presets.pop() if len(presets) == 1 else path.stem


@eval_app.command()
def compare(
    a: Annotated[
        Path, typer.Argument(help="Baseline JSONL (e.g. the bare run).", exists=True, dir_okay=False)
    ],
    b: Annotated[Path, typer.Argument(help="Compared JSONL.", exists=True, dir_okay=False)],
    html: Annotated[Path | None, typer.Option(help="Also write an HTML report here.")] = None,
) -> None:
    """B against A on their shared items: accuracy, cost, paired deltas and McNemar."""
    ra, rb = load_records(a), load_records(b)
    la, lb = _label(a, ra), _label(b, rb)
    if la == lb:
        la, lb = f"{a.stem} (A)", f"{b.stem} (B)"
    console = Console()
    print_summary({la: ra, lb: rb}, console)
    print_comparison(la, ra, lb, rb, console)
    if html is not None:
        _write_html(html, {la: ra, lb: rb}, f"{lb} vs {la}", None)


@eval_app.command()
def report(
    files: Annotated[list[Path], typer.Argument(help="JSONL result files.", exists=True, dir_okay=False)],
    html: Annotated[Path, typer.Option(help="Where to write the HTML report.")] = Path(
        "results/eval/report.html"
    ),
    baseline: Annotated[str, typer.Option(help="Group the deltas are taken against.")] = "bare",
    markdown: Annotated[Path | None, typer.Option(help="Also write the tables as Markdown here.")] = None,
) -> None:
    """Summarize several result files and write the HTML report (and optionally Markdown tables)."""
    groups: dict[str, list[ItemRecord]] = {}
    for path in files:
        records = load_records(path)
        label = _label(path, records)
        groups[label if label not in groups else path.stem] = records
    console = Console()
    print_summary(groups, console)
    if baseline in groups:
        for label, records in groups.items():
            if label != baseline:
                print_comparison(baseline, groups[baseline], label, records, console)
    _write_html(html, groups, "report", None)
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(markdown_summary(groups, baseline), encoding="utf-8")


@eval_app.command("scenarios")
def list_scenarios() -> None:
    """List the bundled scenarios by tier (loading them validates every file)."""
    from tether.evals.scenario_spec import load_suite

    try:
        files = load_suite()
    except TetherError as exc:
        _fail(exc.message)
        return
    for f in files:
        typer.echo(f"{f.tier} ({len(f.scenarios)})")
        for sc in f.scenarios:
            typer.echo(f"  {sc.id:<40} {sc.prompt[:70]}")


def main() -> None:  # pragma: no cover - `python -m tether.evals.cli`
    eval_app(prog_name="tether eval")


if __name__ == "__main__":  # pragma: no cover
    main()
