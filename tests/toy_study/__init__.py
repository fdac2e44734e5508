"""A toy study, written by following docs/layout.md's "Adding a study" step by step: its settings (`toy_settings`),
task (`toy_task`), row of the table of studies (`toy_study`), grid (`toy_grid`, with its flagfile `toy.flags`) and
report (`toy_report`) in one folder. tests/studies/test_add_a_study.py registers it, runs its grid and reports it.

A real study puts the first three in `tf_transfer/studies/<study>/`, its grid in `experiments/` and its report in
`tf_transfer/reporting/`; here they sit together so that the test's study stays out of the package."""
