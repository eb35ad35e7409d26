"""Run pages: the live run, the history, comparisons; the history's filter and the cancel form."""
