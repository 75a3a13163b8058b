"""A study's start: creating or resuming it, checking what a resume rests on, repairing what an
earlier run left behind and queueing the reference and the candidates (opening.py). It sits
below the run-time loop, which calls it, and above the proposals, results and storage it uses."""
