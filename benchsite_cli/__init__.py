"""``benchsite``: the command line for CI pipelines and operators.

It talks to a Benchsite site over its REST API only (httpx) and never imports Django or the
site's packages (an import-linter contract keeps it so), so it installs and runs anywhere a
pipeline does. Exit codes: 0 success (a gate within its thresholds), 1 a regression beyond a
threshold, 2 an error (docs/cli.md).
"""

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2
