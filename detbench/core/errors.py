"""The one exception family for bad input: the CLI prints its message as one line, exit 2."""


class DetbenchError(ValueError):
    """Input detbench cannot use: a file, a directory, an option or a name."""
