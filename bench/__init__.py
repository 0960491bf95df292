"""Load generator and benchmarks; results go to docs/benchmarks.md with the command.

Layout:

- ``bench/__main__.py``: wiring only. ``COMMANDS`` maps each command's name
  to its "module:function"; a new command is one line there.
- ``bench/output.py``: what every command shares: the console, the machine
  line and the JSON record (``write``).
- ``bench/commands/<group>/<command>.py``: one module per command, its typer
  options and the table it prints; it imports the measuring code when it runs,
  so ``--help`` stays fast. Groups by what they measure:
  ``serving`` (the running stack under load: load, idle, sweep, burst, chaos,
  cpu, hop, capacity, report), ``quality`` (the answers: answers, quality,
  cold-start) and ``components`` (one component at a time: features, ranker,
  retriever, rescore, shadow).
- ``bench/*.py``: the measuring code the commands drive (``load.py``,
  ``sweep.py``, ``cpu_profile.py``, ``ranker_bench.py``, ...), importable
  without the command line.
"""
