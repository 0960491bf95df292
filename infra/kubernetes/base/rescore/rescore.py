"""spark-submit's primary file for the nightly job: `python -m pipelines`
with the arguments spark-submit passes on (rescore run ...)."""

import runpy

runpy.run_module("pipelines", run_name="__main__", alter_sys=True)
