"""Outside load generators: a maintained benchmark tool measures what verify relaunches.

`check` runs verify with the tool's turn on the same launch; `requests` writes the trial's
load-test requests out; one module per tool (`guidellm`) turns them into its input, runs it
and reads its report.
"""
