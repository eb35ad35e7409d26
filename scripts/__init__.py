"""Stand-alone tools, run outside the site and the agent (some with the vLLM virtualenv's
Python); nothing here is installed with the package."""
