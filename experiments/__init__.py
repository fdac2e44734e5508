"""Studies, one module each, defining `STUDY` (a `tf_transfer.studies.Study`): its grid as data and its report.

Adding a study is adding a module here (and its flagfile in `flags/`); `python -m tf_transfer.experiments` finds it
by name.
"""
