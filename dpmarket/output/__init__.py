"""What a run, an experiment or a market study leaves for people: tables, summaries, figures, reports.

The computation packages never import this one at module level; results flow one way into it
(scenario → data → market → schedule → replay → results). ``results`` writes run directories,
``report`` the HTML pages, ``plots``/``sweep_plots``/``market_plots``/``timeline_plot`` the figures,
``painter`` draws them in a helper process, ``axes`` holds the shared axis conventions.
"""
