"""Evaluation: BFCL and the scenario suite, bare vs guarded presets (``tether eval``).

* :mod:`tether.evals.cli` — the ``eval_app`` typer app (``tether eval``);
* :mod:`tether.evals.bfcl` / :mod:`tether.evals.bfcl_deps` — BFCL's data, tool conversion and AST checker;
* :mod:`tether.evals.scenario_spec`, :mod:`~tether.evals.backend`, :mod:`~tether.evals.checks`,
  :mod:`~tether.evals.episode` — the scenario suite (YAML under ``scenarios/``), its fake backends,
  validators and agent loop;
* :mod:`tether.evals.client`, :mod:`~tether.evals.local` — sending turns under a preset, in-process or
  to a ``--base-url``;
* :mod:`tether.evals.runner`, :mod:`~tether.evals.records` — resumable runs, one JSON line per item;
* :mod:`tether.evals.report`, :mod:`~tether.evals.html`, :mod:`~tether.evals.stats` — tables, the HTML
  report, Wilson / Newcombe / McNemar;
* :mod:`tether.evals.name_fix` — the layer-0 name-fix set.

Submodules are imported on use; importing this package loads nothing heavy.
"""

__all__: list[str] = []
