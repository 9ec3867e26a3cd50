"""`python -m harness`'s command line: what each command does (commands.py) and its options, each
declared once (options.py); harness/__main__.py parses and reports errors as one line. Here, the parser
class every command's options use, the GPU steps' too."""

import argparse


class OneLineParser(argparse.ArgumentParser):
    """argparse's errors in one line (its usage is what -h prints), exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} -h)\n")
